// Sampling math: the one definition of which tokens top-k / top-p / min-p keep and which of them a
// uniform draw picks (and, below, of the penalties and logprobs the device computes). Three callers
// share it, so host and device cannot drift apart:
//   runner/sampler.cpp (sample_token, after its penalties), the CPU twin of Backend::sample
//   (sample_rows_on_host, sampling_math.cpp) and the CUDA kernel (backend/cuda/sampling.cu).
//
//   rank order   larger logit first, equal logits lower id first            (order_key, then id)
//   weight       w_i = expf((x_i - max) / temperature) in f32, so w_max = 1
//                W_i = floor(w_i * 2^40), an integer: every sum below is exact and the same in any
//                order (host loop, device tree, atomics), which is what makes the device deterministic
//   top-k        the first k tokens in rank order (k <= 0 or k >= vocab: all)
//   top-p        of those, the shortest rank prefix whose sum of W reaches ceil(top_p * sum_topk W)
//   min-p        of those, the tokens with w_i >= min_p (w_max = 1 >= min_p, so one always stays)
//   draw         walk the kept tokens in id order; pick the first whose running sum of W exceeds
//                floor(u * sum_kept W); when none does (u * sum rounded up), the last kept token
//
// Walking in id order (not rank order) lets the device draw with one prefix scan and no sort; the
// distribution is the same, only which uniform maps to which token differs from a rank-order walk.
// Host and device agree on the token except where expf's last-ulp differences between libm and CUDA
// move a running sum across the draw target (or a top-p / min-p boundary): a margin of ~1e-7 of the
// total, so about one draw in millions.
//
// Plain C++17 with no project headers: nvcc compiles this file into the kernel file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PAGELLM_HOST_DEVICE __host__ __device__
#else
#define PAGELLM_HOST_DEVICE
#endif

namespace pagellm::sampling {

// One row's sampling knobs; the params tensor of Backend::sample is an array of these.
struct RowParams {
  float temperature = 0.0f;  // > 0 samples; 0 (or less) leaves the row's id untouched
  int32_t top_k = 0;         // <= 0 = off
  float top_p = 1.0f;        // (0, 1]; >= 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  double uniform = 0.0;      // [0, 1): counter_uniform(seed, num_output_tokens), computed on the host
};
static_assert(sizeof(RowParams) == 24, "RowParams is read as raw bytes on the device");

inline constexpr float kWeightScale = 1099511627776.0f;  // 2^40: vocab * 2^40 < 2^64 up to 2^24 tokens

// A key whose unsigned order is the float order (+0 and -0 are one key: they compare equal).
PAGELLM_HOST_DEVICE inline uint32_t order_key(float x) {
  if (x == 0.0f) x = 0.0f;
#if defined(__CUDA_ARCH__)
  const uint32_t bits = __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#endif
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// w = exp((x - max) / temperature) in f32, in (0, 1] (0 for -inf logits). The device uses the
// round-to-nearest intrinsics so nvcc cannot contract or reorder: every pass sees the same w.
PAGELLM_HOST_DEVICE inline float weight(float x, float max_logit, float temperature) {
#if defined(__CUDA_ARCH__)
  return expf(__fdiv_rn(__fsub_rn(x, max_logit), temperature));
#else
  return std::exp((x - max_logit) / temperature);
#endif
}

PAGELLM_HOST_DEVICE inline uint64_t fixed_weight(float w) { return static_cast<uint64_t>(w * kWeightScale); }

// The sum of W the top-p prefix must reach (at least 1, at most total).
PAGELLM_HOST_DEVICE inline uint64_t top_p_target(uint64_t total, float top_p) {
  const double want = ::ceil(static_cast<double>(top_p) * static_cast<double>(total));
  if (!(want >= 1.0)) return 1;
  return want >= static_cast<double>(total) ? total : static_cast<uint64_t>(want);
}

// The running sum of W the drawn token's must exceed.
PAGELLM_HOST_DEVICE inline uint64_t draw_target(uint64_t total, double uniform) {
  const double target = uniform * static_cast<double>(total);
  return target >= static_cast<double>(total) ? total : static_cast<uint64_t>(target);
}

PAGELLM_HOST_DEVICE inline bool passes_min_p(float w, float min_p) { return w >= min_p; }

// The token a row with temperature > 0 draws from logits[vocab] (f32, on the host).
int32_t draw_token(const float* logits, int64_t vocab, const RowParams& params);

// ----- penalties (Backend::apply_penalties) ---------------------------------------------------
// runner/sampler.cpp's order, per token of the f32 (widened) row, once per distinct id:
//   x = in_history ? (x > 0 ? x / repetition : x * repetition) : x      (history = prompt + outputs)
//   x = x - (frequency * output_count + presence)  where output_count > 0 (outputs only)
// Each step is one f32 rounding; the device uses the _rn intrinsics so nvcc cannot fuse the
// multiply-add (the x86-64 host build has no FMA either), so host and device give the same bits.

// One penalised row; the rows tensor of Backend::apply_penalties is an array of these. Its ids are
// history[history_offset, history_offset + num_prompt_tokens + num_output_tokens), outputs last.
struct PenaltyRow {
  int32_t logits_row = 0;         // the logits row it reads (the runner's sampling row)
  int32_t history_offset = 0;     // into the flat history list [H] i32
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  float repetition_penalty = 1.0f;  // 1 = off
  float presence_penalty = 0.0f;    // 0 = off
  float frequency_penalty = 0.0f;   // 0 = off
  int32_t reserved = 0;
};
static_assert(sizeof(PenaltyRow) == 32, "PenaltyRow is read as raw bytes on the device");

PAGELLM_HOST_DEVICE inline bool uses_repetition(const PenaltyRow& p) { return p.repetition_penalty != 1.0f; }
PAGELLM_HOST_DEVICE inline bool uses_counts(const PenaltyRow& p) {
  return p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

// The penalised logit of one token that occurs in the row's history (output_count of those
// occurrences are outputs).
PAGELLM_HOST_DEVICE inline float penalised_logit(float x, uint32_t output_count, const PenaltyRow& p) {
#if defined(__CUDA_ARCH__)
  if (uses_repetition(p)) x = x > 0 ? __fdiv_rn(x, p.repetition_penalty) : __fmul_rn(x, p.repetition_penalty);
  if (uses_counts(p) && output_count > 0)
    x = __fsub_rn(x, __fadd_rn(__fmul_rn(p.frequency_penalty, static_cast<float>(output_count)), p.presence_penalty));
#else
  if (uses_repetition(p)) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
  if (uses_counts(p) && output_count > 0) x -= p.frequency_penalty * static_cast<float>(output_count) + p.presence_penalty;
#endif
  return x;
}

// The history positions whose ids matter: all of them with a repetition penalty, else the outputs.
PAGELLM_HOST_DEVICE inline int32_t first_counted_position(const PenaltyRow& p) {
  return uses_repetition(p) ? 0 : p.num_prompt_tokens;
}

// Per-id occurrence word of the counting pass: the top bit says "in the prompt", the rest count
// outputs. Integer atomics build it, so its value does not depend on the order of the adds.
inline constexpr uint32_t kInPromptBit = 0x80000000u;
PAGELLM_HOST_DEVICE inline uint32_t output_count_of(uint32_t word) { return word & ~kInPromptBit; }

// ----- logprobs (Backend::logprobs) -----------------------------------------------------------
// From the raw logits' log-softmax, as runner/sampler.cpp's log_softmax_row: max in f32, sum of
// exp(x - max) in f64, logprob = (float)(x - (log(sum) + max)) in f64. Top entries: larger logprob
// first, equal logprobs lower id first (top_logprobs()); ranked by the f32 logprob itself, since
// two logits may round to one logprob.

inline constexpr int kMaxTopLogprobs = 20;  // spec/serving.md: top_logprobs <= 20

// One row of Backend::logprobs; its rows tensor is an array of these.
struct LogprobRow {
  int32_t logits_row = 0;  // the raw logits row
  int32_t id_index = 0;    // ids[id_index] is the token sampled for it
  int32_t num_top = 0;     // 0 ..= kMaxTopLogprobs
};
static_assert(sizeof(LogprobRow) == 12, "LogprobRow is read as raw bytes on the device");

PAGELLM_HOST_DEVICE inline float logprob_of(float x, double log_sum) {
  return static_cast<float>(static_cast<double>(x) - log_sum);
}

}  // namespace pagellm::sampling
