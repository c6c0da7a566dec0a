// SequenceGenerator: one sequence at a time over a contiguous KV cache (a single block as long as the
// sequence). The reference path the paged engine is compared with, and the engine-free generate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "runner/sampling.h"

namespace pagellm {

struct SequenceOptions {
  int max_tokens = 16;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int logprobs = 0;  // top-K log-probabilities per generated token (0 = none)
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
};

struct SequenceOutput {
  std::vector<int32_t> token_ids;
  std::vector<std::vector<TokenLogprob>> logprobs;  // [generated step][K]
  std::vector<float> prompt_logits;  // next-token logits after the prompt, [vocab], as the model wrote them
  std::string finish_reason;        // "stop" or "length"
};

// Checks the prompt against the model ("[generate] prompt token id 9999 is outside the vocabulary
// (vocab_size 512)") and runs it.
Expected<SequenceOutput> generate_sequence(Model& model, Backend& backend, const std::vector<int32_t>& prompt_ids,
                                           const SequenceOptions& options);

}  // namespace pagellm
