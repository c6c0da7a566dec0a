#include "runner/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "backend/sampling_math.h"

namespace pagellm {

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void apply_penalties(std::vector<float>& logits, const SampleInputs& in) {
  const SamplingParams& p = *in.params;
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (TokenId id : in.history)
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) seen[static_cast<size_t>(id)] = true;
    for (size_t i = 0; i < logits.size(); ++i)
      if (seen[i]) logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<TokenId, int> counts;
    const size_t first_output = static_cast<size_t>(in.num_prompt_tokens);
    for (size_t i = first_output; i < in.history.size(); ++i) ++counts[in.history[i]];
    for (const auto& [id, count] : counts) {
      if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
      logits[static_cast<size_t>(id)] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
  }
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t counter) {
  const uint64_t z = mix64(mix64(seed ^ 0x9e3779b97f4a7c15ull) + counter * 0xd1b54a32d192ed03ull);
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::vector<float> log_softmax_row(std::span<const float> logits) {
  const float max_value = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_value);
  const double log_sum = std::log(sum) + max_value;
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<float>(logits[i] - log_sum);
  return out;
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logprobs, int k) {
  std::vector<TokenId> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t count = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(), [&](TokenId a, TokenId b) {
    const float la = logprobs[static_cast<size_t>(a)], lb = logprobs[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  });
  std::vector<TokenLogprob> out;
  for (size_t i = 0; i < count; ++i) out.push_back({ids[i], logprobs[static_cast<size_t>(ids[i])]});
  return out;
}

SampleOutput sample_token(const SampleInputs& in) {
  const SamplingParams& p = *in.params;
  SampleOutput out;
  std::vector<float> logits(in.logits.begin(), in.logits.end());
  if (p.needs_token_history()) apply_penalties(logits, in);
  if (p.is_greedy()) {
    out.token_id = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    // The filtered draw is shared with the device sampler (backend/sampling_math.h says which token).
    sampling::RowParams row;
    row.temperature = p.temperature;
    row.top_k = p.top_k;
    row.top_p = p.top_p;
    row.min_p = p.min_p;
    row.uniform = counter_uniform(in.seed, static_cast<uint64_t>(in.num_output_tokens));
    out.token_id = sampling::draw_token(logits.data(), static_cast<int64_t>(logits.size()), row);
  }
  if (p.num_logprobs.has_value()) {
    const std::vector<float> logprobs = log_softmax_row(in.logits);
    SampledLogprobs lp;
    lp.sampled_logprob = logprobs[static_cast<size_t>(out.token_id)];
    lp.top = top_logprobs(logprobs, *p.num_logprobs);
    out.logprobs = std::move(lp);
  }
  return out;
}

}  // namespace pagellm
