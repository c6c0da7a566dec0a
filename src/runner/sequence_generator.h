// SequenceGenerator: one sequence at a time over a contiguous KV cache (a single block as long as the
// sequence). The reference path the paged engine is compared with, and the engine-free generate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "runner/sampler.h"

namespace pagellm {

struct SequenceOptions {
  SamplingParams sampling;  // max_tokens, temperature, stop ids, eos ids, num_logprobs, ...
  uint64_t seed = 0;        // used when sampling.seed is not set
};

struct SequenceOutput {
  std::vector<int32_t> token_ids;
  std::vector<SampledLogprobs> logprobs;  // one per generated token when num_logprobs is set
  std::vector<float> prompt_logits;  // next-token logits after the prompt, [vocab], as the model wrote them
  FinishReason finish_reason = FinishReason::kLength;
};

// Checks the prompt against the model ("[generate] prompt token id 9999 is outside the vocabulary
// (vocab_size 512)") and runs it.
Expected<SequenceOutput> generate_sequence(Model& model, Backend& backend, const std::vector<int32_t>& prompt_ids,
                                           const SequenceOptions& options);

}  // namespace pagellm
