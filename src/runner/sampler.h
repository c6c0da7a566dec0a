// Sampler: one row of logits -> one token, with the OpenAI/vLLM sampling fields.
//
//   raw logits ─▶ repetition penalty (prompt + outputs) ─▶ presence / frequency penalties (outputs)
//              ─▶ temperature ─▶ top-k ─▶ top-p ─▶ min-p ─▶ draw (or argmax when temperature = 0)
//   logprobs are taken from the raw logits' log-softmax (what the model believes), as vLLM does.
//   The filter-and-draw part is sampling::draw_token (backend/sampling_math.h), which the device
//   sampler (Backend::sample) shares. The runner samples every row on the device (penalties by
//   Backend::apply_penalties, logprobs by Backend::logprobs); sample_token is the CPU reference the
//   tests hold those ops to (tests/unit/runner/test_penalty_logprob_ops.cpp).
//
// Randomness is counter-based: draw n of a request depends only on (seed, n = num_output_tokens),
// so a seeded request gives the same tokens alone, in any batch, and after preemption.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/request.h"
#include "sched/step.h"

namespace pagellm {

// Uniform in [0, 1) for draw `counter` of stream `seed`.
double counter_uniform(uint64_t seed, uint64_t counter);

// log_softmax of logits[vocab] (f64 accumulation), as f32.
std::vector<float> log_softmax_row(std::span<const float> logits);
// The k most likely tokens, most likely first (ties: lower id first).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logprobs, int k);

struct SampleInputs {
  std::span<const float> logits;           // [vocab], the model's raw output
  const SamplingParams* params = nullptr;
  std::span<const TokenId> history;        // prompt + outputs (only needed for penalties)
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;               // generated so far: the draw counter
  uint64_t seed = 0;                       // the request's seed (given, or drawn at submit)
};

struct SampleOutput {
  TokenId token_id = 0;
  std::optional<SampledLogprobs> logprobs;
};

SampleOutput sample_token(const SampleInputs& inputs);

}  // namespace pagellm
