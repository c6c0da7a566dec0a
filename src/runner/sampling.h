// Host-side token choice from one row of logits: greedy, or temperature sampling with a seeded
// stream, plus top-K log-probabilities from the full-vocabulary log-softmax.
#pragma once

#include <cstdint>
#include <vector>

namespace pagellm {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// A counter-based random stream: the n-th draw of a request depends only on (seed, n), so a seeded
// request gives the same tokens alone or in any batch.
class SeededStream {
 public:
  explicit SeededStream(uint64_t seed) : seed_(seed) {}
  double next_uniform();  // [0, 1)

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

// log_softmax of logits[vocab] in f64 accumulation, as f32.
std::vector<float> log_softmax_row(const float* logits, int64_t vocab);
// The k most likely tokens, most likely first (ties: lower id first).
std::vector<TokenLogprob> top_logprobs(const std::vector<float>& logprobs, int k);
// temperature <= 0: argmax (first maximum); else samples softmax(logits / temperature).
int32_t choose_token(const float* logits, int64_t vocab, float temperature, SeededStream& stream);

}  // namespace pagellm
