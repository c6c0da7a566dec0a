// Launchers of the device sampler, penalties and logprobs (sampling.cu), callable from host C++; a plain header like kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/sampling_math.h"

namespace pagellm::cuda {

// ids[r] = sampling::draw_token(logits row r, params[r]) for rows with params[r].temperature > 0;
// other rows keep their id. One block per row, no scratch, no host-side planning (graph-safe).
// logits: R rows of V; params: [R] on the device; ids: [R] i32 on the device.
cudaError_t launch_sample(DType dtype, int32_t* ids, Rows logits, const sampling::RowParams* params,
                          cudaStream_t stream);

// out (f32) row p = logits row rows[p].logits_row, penalised (Backend::apply_penalties). Three
// launches: widen the rows, count each row's history ids into occurrence_words, then penalise each
// distinct id once (the thread that swaps its nonzero word for 0), which leaves the words zeroed for
// the next call. occurrence_words: [num_rows, V] u32 on the device, all zero on entry.
// history: [H] i32; rows: [num_rows]; max_history_tokens: the longest row's prompt + outputs (a grid
// size, so no host reads of device data).
cudaError_t launch_apply_penalties(DType dtype, float* out, Rows logits, const sampling::PenaltyRow* rows,
                                   int64_t num_rows, const int32_t* history, int64_t max_history_tokens,
                                   uint32_t* occurrence_words, cudaStream_t stream);

// Backend::logprobs: one block per row; out_ids / out_logprobs [num_rows, width] (width <= 1 +
// kMaxTopLogprobs), ids: the sampled tokens, rows: [num_rows]. No scratch, deterministic.
cudaError_t launch_logprobs(DType dtype, int32_t* out_ids, float* out_logprobs, int64_t width, Rows logits,
                            const int32_t* ids, const sampling::LogprobRow* rows, int64_t num_rows,
                            cudaStream_t stream);

// Backend::apply_token_bitmask: one block per masked row; bitmask [num_rows, ceil(V / 32)] i32 words.
cudaError_t launch_apply_token_bitmask(DType dtype, Rows logits, const uint32_t* bitmask, const int32_t* rows,
                                       int64_t num_rows, cudaStream_t stream);
// Backend::add_logit_bias: entries [num_entries, 3] i32 (row, token, f32 bits); one thread, in order
// (a repeated (row, token) adds twice, as the host twin does).
cudaError_t launch_add_logit_bias(DType dtype, Rows logits, const int32_t* entries, int64_t num_entries,
                                  cudaStream_t stream);

}  // namespace pagellm::cuda
