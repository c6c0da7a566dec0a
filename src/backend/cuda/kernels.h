// Launchers of the CUDA kernels, callable from host C++. This header (and the .cu files) stay free of
// fmt/Tensor so nvcc compiles little: cuda_backend.cpp validates the views (CHECK), flattens them into
// the plain structs below and calls a launcher, which returns the launch's cudaError_t.
//
// Every floating operand of one op shares one dtype (f32, bf16 or f16); that dtype is the template
// parameter chosen at the one dispatch point of each .cu file. Offsets are 64-bit everywhere.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/op_kinds.h"
#include "backend/kernel_options.h"
#include "core/dtype.h"

namespace pagellm::cuda {

// A view whose last dim is contiguous, seen as rows (one vector of the last dim each):
//   element offset of row r = (r / inner_rows) * outer_stride + (r % inner_rows) * inner_stride
// e.g. one head of one token of [T, heads, head_dim], possibly a strided view into a fused qkv.
struct Rows {
  void* data = nullptr;
  int64_t num_rows = 0;
  int64_t row_size = 0;  // elements
  int64_t inner_rows = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;
};

// ----- elementwise.cu -------------------------------------------------------------------------

// How the norms apply their weight (backend.h NormWeight): kPlain rounds the normalised value to the
// dtype before w * it; the f32 forms multiply x * rsqrt(...) by (offset + w) in f32 and round once:
// offset 1 for kOnePlus, 0 for kF32Weight (0 + w is w exactly).
struct NormForm {
  bool f32_product = false;
  float offset = 0.0f;
};
NormForm norm_form(NormWeight mode);

// out = rms_norm(x) with w in `form`. w: [row_size], contiguous.
cudaError_t launch_rms_norm(DType dtype, Rows out, Rows x, const void* w, float eps, NormForm form,
                            cudaStream_t stream);
cudaError_t launch_add(DType dtype, Rows out, Rows a, Rows b, cudaStream_t stream);
// x: [T, H, head_dim] as rows (T * H rows); rotates the first 2 * half dims of each row.
cudaError_t launch_rope(DType dtype, Rows x, int64_t num_heads, const int32_t* positions,
                        const float* inv_freq, int64_t half, float attention_scaling, cudaStream_t stream);
// out rows [I] = act(gate_up[:I]) * gate_up[I:] (backend.h Activation)
cudaError_t launch_act_mul(DType dtype, Rows out, Rows gate_up, Activation act, cudaStream_t stream);
// x rows += bias [row_size] (x's dtype), in place
cudaError_t launch_add_bias(DType dtype, Rows x, const void* bias, cudaStream_t stream);
// out = x * s
cudaError_t launch_scale(DType dtype, Rows out, Rows x, float s, cudaStream_t stream);
// x = cap * tanh(x / cap) with transformers' rounding points (backend.h softcap), in place
cudaError_t launch_softcap(DType dtype, Rows x, float cap, cudaStream_t stream);
// out row t = table row ids[t]; a row of `table` has out.row_size elements. Traps on ids outside
// [0, num_table_rows) (a broken invariant: ids are validated before they reach the device).
cudaError_t launch_embedding(DType dtype, Rows out, Rows table, const int32_t* ids, cudaStream_t stream);
// hidden = hidden + delta (rounded), then normed = rms_norm(hidden) * w: the residual add of one
// block fused with the norm that opens the next. One warp per row, like launch_rms_norm.
cudaError_t launch_add_rms_norm(DType dtype, Rows hidden, Rows normed, Rows delta, const void* w, float eps,
                                NormForm form, cudaStream_t stream);
// out row r = rms_norm(hidden row rows[r] + delta row rows[r]) * w (Backend::add_gather_rms_norm): the
// last block's residual add, the gather of the rows that sample and the final norm in one launch
// where rows take the block form (else the three launches; hidden is then left holding the sums).
cudaError_t launch_add_gather_rms_norm(DType dtype, Rows out, Rows hidden, Rows delta, const int32_t* rows,
                                       const void* w, float eps, NormForm form, cudaStream_t stream);
// ids[r] = first index of the maximum of logits row r. Scratch: part_value, part_index
// [num_rows * kArgmaxScratchPerRow] (the per-split maxima of the first pass).
inline constexpr int64_t kArgmaxScratchPerRow = 64;
cudaError_t launch_argmax(DType dtype, int32_t* ids, Rows logits, float* part_value, int64_t* part_index,
                          cudaStream_t stream);
// dst[pairs[2i]] = src[pairs[2i + 1]] for i < num_pairs (Backend::copy_ids); traps on an index
// outside [0, dst_size) or [0, src_size).
cudaError_t launch_copy_ids(int32_t* dst, int64_t dst_size, const int32_t* src, int64_t src_size, const int32_t* pairs,
                            int64_t num_pairs, cudaStream_t stream);
// out (f32) row r = log_softmax(logits row r)
cudaError_t launch_log_softmax(DType dtype, Rows out_f32, Rows logits, cudaStream_t stream);

// ----- attention.cu ---------------------------------------------------------------------------

// Paged caches [num_blocks, block_size, num_kv_heads, head_dim]; strides in elements.
struct CacheLayout {
  int64_t num_blocks = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;
  int64_t stride_block = 0, stride_slot = 0, stride_head = 0;
};

// The element type of a paged cache and its dequant multipliers: cache_dtype is the rows' dtype, or
// f8_e4m3 (the FP8 KV cache: stored = e4m3(x / scale), read = float(stored) * scale; backend.h KvScales).
struct KvFormat {
  DType cache_dtype = DType::kF32;
  float k_scale = 1.0f, v_scale = 1.0f;  // used by f8_e4m3 caches only
};

// k, v: [T, num_kv_heads, head_dim] rows views of `dtype`; slot_mapping [T] i64 (-1 = skip).
cudaError_t launch_write_kv(DType dtype, KvFormat format, void* k_cache, void* v_cache, CacheLayout cache, Rows k,
                            Rows v, const int64_t* slot_mapping, int64_t num_tokens, cudaStream_t stream);

// The fused attention prologue (backend.h qk_norm_rope_write_kv): one warp per (token, head) row of
// q ([T * num_q_heads] rows) and k ([T * num_kv_heads] rows), head_dim <= kMaxPrologueHeadDim.
inline constexpr int64_t kMaxPrologueHeadDim = 256;
struct QkPrologueArgs {
  Rows q, k, v;
  int64_t num_tokens = 0, num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  const void* q_norm = nullptr;  // [head_dim]; both null: no q/k norm
  const void* k_norm = nullptr;
  float eps = 0.0f;
  NormForm norm_form;
  const int32_t* positions = nullptr;  // [T]
  const float* inv_freq = nullptr;     // [half]
  int64_t half = 0;
  float attention_scaling = 1.0f;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  CacheLayout cache;
  KvFormat kv_format;  // the caches' dtype (q's, or f8_e4m3) and scales
  const int64_t* slot_mapping = nullptr;  // [T], -1 = skip
};
cudaError_t launch_qk_norm_rope_write_kv(DType dtype, const QkPrologueArgs& args, cudaStream_t stream);

struct AttentionArgs {
  const void* q = nullptr;  // [T, num_heads, head_dim]
  int64_t q_stride_row = 0, q_stride_head = 0;
  void* out = nullptr;  // [T, num_heads, head_dim]
  DType out_dtype = DType::kF32;
  int64_t out_stride_row = 0, out_stride_head = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  CacheLayout k_layout, v_layout;
  KvFormat kv_format;  // the caches' dtype (q's, or f8_e4m3: the decode and general kernels read it)
  const int32_t* cu_seqlens_q = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens_k = nullptr;    // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride]
  int64_t block_table_stride = 0;
  int64_t num_seqs = 0, num_tokens = 0, num_heads = 0;
  float scale = 1.0f, softcap = 0.0f;
  bool causal = true;
  int32_t window = 0;  // 0 = off
  const float* sinks = nullptr;  // [num_heads] f32 or none (AttentionParams::sinks)
};

// Keys are processed in partitions of this many absolute positions (see attention.cu).
// 128: at batch 1 a 1,024-key context splits into 8 partitions per head (128 blocks) rather than 4.
inline constexpr int64_t kAttentionPartition = 128;

// How launch_attention runs one call, planned on the host from shapes and hints alone (so a CUDA
// graph of a decode step replays the same launches). Three kernels share the work:
//  - the general kernel (any q_len): block (row, query head[, split]); with splits > 1
//    ("flash-decoding"), block (row, head, split) computes only partition `split` and a second kernel
//    folds them in order;
//  - the decode kernel (sequences with q_len == 1): block (sequence, kv head[, split]) serves every
//    query head of the kv head's GQA group from one read of each K/V chunk; with decode_splits > 1 each
//    block covers a range of units (decode_unit_chunks chunks of 32 keys) and writes one state per unit,
//    folded in order by a merge kernel;
//  - the prefill kernel (sequences with q_len >= 2, bf16 q and caches, when the max_seqlen_q hint is >= 2):
//    block (64-row tile, query head) on tensor cores; it replaces the general kernel, and the decode
//    kernel takes the batch's q_len == 1 sequences.
// The general and decode kernels fold the same 32-key chunk states in the same order with the same
// arithmetic, so a decode row's output does not depend on the plan (batch invariance, bitwise). The
// prefill kernel sums in its own (fixed, per-row) order: its rows do not depend on the batch or on the
// chunking of the prompt, but differ in the last bits from what the general kernel gives.
struct AttentionPlan {
  bool general = true;               // launch the general kernel
  bool prefill = false;              // launch the prefill kernel
  bool general_skips_decode = false;  // ... leaving sequences with q_len == 1 to the decode kernel
  int64_t splits = 1;                 // general kernel
  int64_t decode_splits = 0;          // 0: no decode kernel
  int64_t decode_unit_chunks = 1;     // 1 or 4 (a partition)
  int64_t decode_units = 0;           // unit states per (row, head) in `partials`
  int64_t decode_head_parts = 1;      // blocks a (sequence, kv head) pair's query heads are split over
  int64_t decode_smem_bytes = 0;
  int64_t partial_floats = 0;         // scratch `partials` must hold
};
// The prefill kernel (prefill_attention.cu): sequences with q_len >= 2 in bf16, head_dim 16, 32,
// 64, 128 or 256, on tensor cores (wmma); 0 bytes = head_dim not supported.
int64_t prefill_attention_smem_bytes(int64_t head_dim);
cudaError_t launch_prefill_attention(DType dtype, const AttentionArgs& args, cudaStream_t stream);

// max_keys: the longest context any row may have (block-table width, or the max_seqlen_k hint);
// max_seqlen_q: the hint (0 = unknown). The kernel switches: KernelOptions' decode_attention,
// prefill_attention, decode_partition_units.
// short_rows_split_keys: AttentionParams' hint (speculative rows of <= 8 queries skip the prefill kernel).
AttentionPlan plan_attention(DType dtype, const AttentionArgs& args, int64_t max_keys, int32_t max_seqlen_q,
                             int num_sms, const KernelOptions& options, bool short_rows_split_keys = false);
cudaError_t launch_attention(DType dtype, const AttentionArgs& args, const AttentionPlan& plan, float* partials,
                             cudaStream_t stream);

// ----- gdn.cu (hybrid models; backend.h documents each op) ------------------------------------

// The varlen batch of the GDN ops: [num_seqs + 1] and [num_seqs] i32 on the device; slots must lie
// in [0, num_slots) (a kernel traps otherwise).
struct GdnSeqs {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* state_slots = nullptr;
  // [T] or null: the slot that also receives a sequence's state after token row t (-1 = none); the
  // chunked delta rule writes it only at its chunk ends (GdnParams::checkpoint_slots).
  const int32_t* checkpoint_slots = nullptr;
  int64_t num_seqs = 0, num_slots = 0;
};

// Causal depthwise conv1d + SiLU with its rolling state: x, out [T, channels] rows (out must not
// alias x), weight [channels, kernel] and conv_state [num_slots, channels, kernel - 1] contiguous.
inline constexpr int64_t kMaxGdnConvKernel = 8;
cudaError_t launch_gdn_conv1d(DType dtype, Rows out, Rows x, const void* weight, void* conv_state, GdnSeqs seqs,
                              int64_t channels, int64_t kernel, cudaStream_t stream);

// The gated delta rule: q, k rows of [T, Hk, dk], v and out rows of [T, Hv, dv], a and b rows of
// [T, Hv]; A_log, dt_bias [Hv] f32; state [num_slots, Hv, dk, dv] f32. Two kernels (gdn.cu): the
// recurrent form for short sequences (decode), the chunked form (C = 64) for long ones (prefill).
inline constexpr int64_t kMaxGdnHeadDim = 256;  // dk; dv is free
enum class GdnDeltaForm { kAuto, kRecurrent, kChunked };  // GdnAlgo of backend.h
struct GdnDeltaArgs {
  Rows q, k, v, a, b, out;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  float* state = nullptr;
  GdnSeqs seqs;
  int64_t num_k_heads = 0, num_v_heads = 0, dk = 0, dv = 0;
  float q_scale = 1.0f;
  GdnDeltaForm form = GdnDeltaForm::kAuto;
  int32_t max_seqlen_q = 0;  // host hint (0 = unknown): below the chunked threshold, no chunked launch
  // kAuto: sequences of at least this many tokens take the chunked kernel (0: gdn.cu's default;
  // INT64_MAX: never). KernelOptions' gdn_chunked / gdn_chunked_min_tokens.
  int64_t auto_chunked_min_tokens = 0;
  // f32 scratch of the chunked form (gdn.cu: the state-independent quantities of every chunk), at least
  // gdn_chunk_scratch_floats(args) floats; may be null where that is 0.
  float* chunk_scratch = nullptr;
  int64_t chunk_scratch_floats = 0;
};
// The scratch a launch with these args needs (0: no sequence can take the chunked form).
int64_t gdn_chunk_scratch_floats(const GdnDeltaArgs& args);
cudaError_t launch_gdn_delta_rule(DType dtype, const GdnDeltaArgs& args, cudaStream_t stream);

// out = cast(cast(w * cast(x * rsqrt(mean(x^2) + eps))) * silu(z)) per row; w [row_size].
cudaError_t launch_gated_rms_norm(DType dtype, Rows out, Rows x, Rows z, const void* w, float eps,
                                  cudaStream_t stream);
// out = x * cast(sigmoid(gate)); gate rows have x's row_size or 1.
cudaError_t launch_sigmoid_mul(DType dtype, Rows out, Rows x, Rows gate, cudaStream_t stream);
// out[row_ids[i]] = cast(out[row_ids[i]] + cast(weights[i] * x[i])) for i in order.
cudaError_t launch_add_rows_scaled(DType dtype, Rows out, Rows x, const int32_t* row_ids, const float* weights,
                                   cudaStream_t stream);

}  // namespace pagellm::cuda
