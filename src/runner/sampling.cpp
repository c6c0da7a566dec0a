#include "runner/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagellm {

double SeededStream::next_uniform() {
  uint64_t z = seed_ * 0x9e3779b97f4a7c15ull + (++counter_) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::vector<float> log_softmax_row(const float* logits, int64_t vocab) {
  const float max_value = *std::max_element(logits, logits + vocab);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_value);
  const double log_sum = std::log(sum) + max_value;
  std::vector<float> out(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) out[static_cast<size_t>(i)] = static_cast<float>(logits[i] - log_sum);
  return out;
}

std::vector<TokenLogprob> top_logprobs(const std::vector<float>& logprobs, int k) {
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t count = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(), [&](int32_t a, int32_t b) {
    return logprobs[static_cast<size_t>(a)] > logprobs[static_cast<size_t>(b)] ||
           (logprobs[static_cast<size_t>(a)] == logprobs[static_cast<size_t>(b)] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (size_t i = 0; i < count; ++i) out.push_back({ids[i], logprobs[static_cast<size_t>(ids[i])]});
  return out;
}

int32_t choose_token(const float* logits, int64_t vocab, float temperature, SeededStream& stream) {
  if (temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  const float max_value = *std::max_element(logits, logits + vocab);
  std::vector<double> weights(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    weights[static_cast<size_t>(i)] = std::exp((static_cast<double>(logits[i]) - max_value) / temperature);
    total += weights[static_cast<size_t>(i)];
  }
  double target = stream.next_uniform() * total;
  for (int64_t i = 0; i < vocab; ++i) {
    target -= weights[static_cast<size_t>(i)];
    if (target < 0.0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(vocab - 1);
}

}  // namespace pagellm
