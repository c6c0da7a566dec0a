// Backend: the op interface every device implements (CPU is the readable reference, CUDA the fast one).
// Ops write into caller-allocated outputs and keep no hidden state. Floating inputs may be f32, bf16 or
// f16; ops compute in f32 and round once when writing `out` in out's dtype, which is how the model
// reproduces the rounding points of transformers (see spec/models.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/communicator.h"
#include "backend/kernel_options.h"
#include "core/status.h"
#include "core/tensor.h"
#include "backend/moe_kinds.h"
#include "backend/op_kinds.h"

namespace pagellm {


// The dequant multipliers of an FP8 (f8_e4m3) KV cache, per layer (vLLM's convention): write_kv stores
// e4m3(k / k_scale) (round to nearest even, saturating at +-448) and attention reads float(stored) *
// k_scale; likewise v with v_scale. Caches of a float dtype (f32/bf16/f16) ignore the scales: they
// store k and v as they are, bit for bit.
struct KvScales {
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Everything the varlen paged attention op needs besides q, caches and out.
//   Sequence s owns query rows [cu_seqlens_q[s], cu_seqlens_q[s+1]); its context after this step is
//   seq_lens_k[s] tokens, so query row i of s sits at absolute position seq_lens_k[s] - q_len(s) + i.
//   Token at absolute position p of s lives in slot block_tables[s][p / block_size] * block_size
//   + p % block_size of the caches.
struct AttentionParams {
  TensorView cu_seqlens_q;  // [num_seqs + 1], i32, on the op's device
  TensorView seq_lens_k;    // [num_seqs], i32
  TensorView block_tables;  // [num_seqs, max_blocks_per_seq], i32
  float scale = 1.0f;       // multiplies q.k (usually head_dim^-0.5)
  bool causal = true;
  int32_t sliding_window = -1;  // -1 = off; else a query at p sees keys j with p - W < j <= p
  float softcap = 0.0f;         // 0 = off; else s = softcap * tanh(s / softcap) after scaling
  int32_t max_seqlen_q = 0;     // host-side planning hints (0 = unknown)
  int32_t max_seqlen_k = 0;
  // Planning hint: the step's multi-token rows are speculative verification rows (1 + k tokens), whose
  // keys a GPU backend may split across blocks rather than tile their few queries (prompt chunks keep
  // a kernel whose rows do not depend on chunking).
  bool short_rows_split_keys = false;
  KvScales kv_scales{};         // used when the caches are f8_e4m3
  // Attention sinks (gpt-oss): [num_heads] f32 on the op's device, or empty (data == nullptr) = none.
  // Head h's sink is one more logit in its softmax denominator, with no value:
  //   out = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(sinks[h] - m)),  m = max(max_j s_j, sinks[h]).
  // (A row that sees no key then gives zeros, as without sinks.)
  TensorView sinks;
};

// The stacked weights of one projection of all routed experts (backend.h moe_expert_gemm):
//   dense: weight [E, N, K] (the backend's weight dtype), scales empty;
//   MXFP4: weight = blocks [E, N, K / 2] u8 and scales [E, N, K / 32] u8, as matmul_mxfp4 per expert;
//   bias [E, N] (x's dtype) or empty (data == nullptr).
// MXFP4: scale_min / scale_max bound the e8m0 bytes of `scales` (the loader's minimum and maximum; the
// whole range when not known), so a backend may convert with arithmetic that holds only for bounded
// exponents and leave the general conversion out of its inner loops.
struct MoeExpertWeights {
  TensorView weight;
  TensorView scales;
  TensorView bias;
  uint8_t scale_min = 0, scale_max = 255;
  bool mxfp4() const { return scales.data != nullptr; }
};

// Rows of one tile of the grouped expert layout (moe_group): a tile holds pairs of one expert.
inline constexpr int64_t kMoeTileRows = 8;
// Tiles the grouped layout of `pairs` pairs over `num_experts` experts may need: every non-empty
// expert wastes less than one tile.
inline int64_t moe_max_tiles(int64_t pairs, int64_t num_experts) {
  return (pairs + kMoeTileRows - 1) / kMoeTileRows + (pairs < num_experts ? pairs : num_experts);
}

// A recorded sequence of queued ops (a CUDA graph) that replay() queues again, with the same
// pointers and whatever the buffers they name hold at replay time.
class OpGraph {
 public:
  virtual ~OpGraph() = default;
  virtual void replay() = 0;
};

// Which form of the gated delta rule runs (both give the same result up to f32 rounding).
// kAuto: recurrent for sequences shorter than kGdnMinChunkedTokens (decode, speculative rows of
// 1 + k tokens), chunked (C = 64) for longer ones (prefill), on every backend.
enum class GdnAlgo { kAuto, kRecurrent, kChunked };
// The chunk of the chunked form, in tokens, on every backend (chunks start at a sequence's first row).
inline constexpr int kGdnChunkTokens = 64;
// Under kAuto, a sequence of at least this many tokens takes the chunked form on every backend.
inline constexpr int kGdnMinChunkedTokens = 16;

// The varlen batch of the Gated DeltaNet ops (spec/models.md B.6-B.10). Sequence s owns token rows
// [cu_seqlens_q[s], cu_seqlens_q[s+1]) and reads and then writes its state in slot state_slots[s] of
// the state tensors; a sequence's first step must find its slot zeroed (the runner does that).
struct GdnParams {
  TensorView cu_seqlens_q;  // [num_seqs + 1], i32, on the op's device
  TensorView state_slots;   // [num_seqs], i32
  int32_t max_seqlen_q = 0;  // host-side planning hint (0 = unknown)
  GdnAlgo algo = GdnAlgo::kAuto;
  // State checkpoints (optional; empty = none): [T] i32, the state slot that also receives the
  // sequence's state after token row t, or -1 (prefix-cache checkpoints; the states after the drafts
  // of a speculative row). gdn_delta_rule honours them after any token of a sequence it runs in the
  // recurrent form, and only where a chunk ends in the chunked form (every 64 tokens, and the last).
  TensorView checkpoint_slots;
};

// The CPU twin of Backend::sample on host views (sampling_math.cpp): rows with temperature > 0 get
// sampling::draw_token, the others keep their id.
void sample_rows_on_host(TensorView ids, const TensorView& logits, const TensorView& params);
// The CPU twins of Backend::apply_penalties and Backend::logprobs on host views (sampling_math.cpp).
void apply_penalties_on_host(TensorView out, const TensorView& logits, const TensorView& rows,
                             const TensorView& history);
void logprobs_on_host(TensorView out_ids, TensorView out_logprobs, const TensorView& logits, const TensorView& ids,
                      const TensorView& rows);
// The CPU twins of Backend::apply_token_bitmask and Backend::add_logit_bias on host views.
void apply_token_bitmask_on_host(TensorView logits, const TensorView& bitmask, const TensorView& rows);
void add_logit_bias_on_host(TensorView logits, const TensorView& entries);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // The dtype weights are stored in for a checkpoint whose activations are `activation_dtype`
  // (GPUs keep the activation dtype; the CPU keeps bf16 and widens f16 to f32).
  virtual DType weight_dtype(DType activation_dtype) const = 0;
  // Bytes the KV cache may still take on this device (host RAM available on the CPU, free device
  // memory on a GPU); -1 when unknown.
  virtual int64_t free_memory_bytes() const { return -1; }
  // Zero-filled tensor on this backend's device.
  virtual Tensor alloc(Shape shape, DType dtype) = 0;
  // Copies between any two devices; shapes must have equal numel, dtypes equal.
  virtual void copy(TensorView dst, const TensorView& src) = 0;
  // Waits for all queued work (no-op on CPU).
  virtual void synchronize() = 0;
  // Which kernels run where there is a choice (backend/kernel_options.h); backends without one ignore it.
  virtual void set_kernel_options(const KernelOptions& options) { (void)options; }
  virtual KernelOptions kernel_options() const { return {}; }
  // Makes this backend's device the calling thread's current one (CUDA: cudaSetDevice); a thread that
  // runs a tensor-parallel rank calls it first.
  virtual void make_current() {}
  // Which device of its kind this backend runs on (CUDA: the GPU's index; 0 on the CPU).
  virtual int device_index() const { return 0; }
  // Host memory the device copies from and into without staging (page-locked on CUDA, so a
  // host-to-device copy() from it returns before the copy is done: keep it unchanged until the next
  // synchronize()). Plain host memory on the CPU.
  virtual Tensor alloc_host(Shape shape, DType dtype) { return Tensor::cpu(shape, dtype); }
  // ---- Pipelined steps: the host prepares step N+1 while the device still runs step N.
  // A device-to-host copy into alloc_host() memory that does not wait: read dst only after
  // wait_for(m) of a mark m made after it. (The default is copy(), which waits.)
  virtual void copy_to_host_async(TensorView dst, const TensorView& src) { copy(dst, src); }
  // A point in the queued work: wait_for(mark()) returns once everything queued before the mark has
  // run. Marks are numbered in order; waiting for an old one may wait for a later one (never less).
  virtual uint64_t mark() { return 0; }
  virtual void wait_for(uint64_t mark) { (void)mark; }
  // Work queued on this backend from now on starts after the work `other` has queued so far, without
  // the host waiting (the ranks of a tensor-parallel model hand each step over this way, eagerly and
  // around the replay of their graphs). On CUDA an event of other's stream that this stream waits for.
  // Backends that run ops as they are called need nothing.
  virtual void wait_for_work_of(Backend& other) { (void)other; }
  // dst[pairs[i][0]] = src[pairs[i][1]] for i < N: dst [D], src [S] i32 vectors, pairs [N, 2] i32, all
  // on the op's device; indices outside dst or src are a broken invariant (CHECK on the CPU, trap on
  // a GPU). The runner moves the ids a still-running step samples into the next step's inputs this way.
  virtual void copy_ids(TensorView dst, const TensorView& src, const TensorView& pairs);
  // Records the ops `record` queues into a graph instead of running them (host-side planning
  // happens during recording, DESIGN.md rule 6); nullptr where the backend has no graphs (CPU).
  // `record` must not allocate, copy to the host or synchronize.
  virtual std::unique_ptr<OpGraph> capture(const std::function<void()>& record) {
    (void)record;
    return nullptr;
  }

  // out[M, N] = x[M, K] . w[N, K]^T
  virtual void matmul(TensorView out, const TensorView& x, const TensorView& w) = 0;
  // matmul, then add_bias(out, bias) (bias [N]): the same bits; a backend may do both in one launch
  // (CUDA's decode-sized GEMV adds it in its epilogue).
  virtual void matmul_bias(TensorView out, const TensorView& x, const TensorView& w, const TensorView& bias) {
    matmul(out, x, w);
    add_bias(out, bias);
  }

  // ---- Quantized weights (layers::Linear chooses; each format's loader fills these layouts).
  // Block-scaled FP8 (the Hugging Face "fp8" format, DeepSeek style):
  //   w [N, K] f8_e4m3, w_scale [ceil(N / block_n), ceil(K / block_k)] f32, and
  //   W[n, k] = float(w[n, k]) * w_scale[n / block_n, k / block_k] (the scale is a dequant multiplier).
  // out[M, N] = x[M, K] . W^T with f32 accumulation, rounded once to out's dtype (x's dtype). The
  // reference dequantizes W in f32 and multiplies by x as given; a device may also quantize x per
  // token and 128-group (W8A8) for large M, within the kernel tests' tolerance.
  virtual void matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                                int64_t block_n, int64_t block_k) {
    CHECK_MSG(false, "[{}] matmul_fp8_block is not implemented on this backend", name());
  }
  // Dynamic FP8 quantization of activations per token and 128-column group (the first half of a
  // W8A8 product; an op of its own so every backend's version can be compared bitwise):
  //   x [M, K] f32/bf16/f16 (row stride, unit column stride), K % 128 == 0;
  //   x_fp8 [M, K] f8_e4m3 contiguous; scales [K / 128, M] f32 contiguous: group-major, token m's
  //   scale of group g at scales[g * M + m] (the "outer-dim-major" layout cuBLASLt's VEC128_32F reads);
  //   scale = max|x[m, 128g .. 128g + 127]| / 448 in f32 (1 where that is 0),
  //   x_fp8[m, c] = e4m3(x[m, c] / scale) (f32 division, round to nearest even, saturating to +-448).
  virtual void quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) {
    CHECK_MSG(false, "[{}] quantize_fp8_groups is not implemented on this backend", name());
  }
  // Group-quantized 4-bit weights (AWQ and GPTQ, repacked at load into one layout):
  //   qweight [N, K / 8] i32: bits 4j..4j+3 of word qweight[n, k / 8] hold q[n, k] for j = k % 8 (0..15);
  //   scales [N, K / group_size] f32; zeros [N, K / group_size] u8 (0..15);
  //   W[n, k] = (q[n, k] - zeros[n, k / group_size]) * scales[n, k / group_size], in f32.
  // out[M, N] = x[M, K] . W^T with f32 accumulation, rounded once to out's dtype. K % group_size == 0,
  // group_size % 8 == 0.
  virtual void matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                           const TensorView& zeros, int64_t group_size) {
    CHECK_MSG(false, "[{}] matmul_int4 is not implemented on this backend", name());
  }
  // MXFP4 weights (OCP microscaling, as gpt-oss releases its experts), kept 4-bit:
  //   blocks [N, K / 2] u8: byte j of row n holds element 2j in its low nibble and 2j + 1 in its high
  //   one, each an e2m1 code (core/dtype.h kE2m1Values); scales [N, K / 32] u8, e8m0 exponents;
  //   W[n, k] = e2m1(code) * 2^(scales[n, k / 32] - 127) (exact in f32). K % 32 == 0.
  // out[M, N] = x[M, K] . W^T with f32 accumulation, rounded once to out's dtype.
  virtual void matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales) {
    CHECK_MSG(false, "[{}] matmul_mxfp4 is not implemented on this backend", name());
  }
  // out[rows, D] = rms_norm(x[rows, D]) with weight w[D]; rows may be any leading shape.
  virtual void rms_norm(TensorView out, const TensorView& x, const TensorView& w, float eps,
                        NormWeight mode) = 0;
  // out = a + b, elementwise, equal shapes.
  virtual void add(TensorView out, const TensorView& a, const TensorView& b) = 0;
  // In place on x[T, num_heads, head_dim]: rotate-half RoPE on the first rot_dim = 2 * inv_freq.numel()
  // dims of each head, position positions[t] (i32). cos and sin are computed in f32, multiplied by
  // attention_scaling, then rounded to x's dtype before use (as transformers does).
  virtual void rope(TensorView x, const TensorView& positions, const TensorView& inv_freq,
                    float attention_scaling) = 0;
  // out[T, I] = act(gate_up[T, :I]) * gate_up[T, I:]  (gate rows first, then up: the fused layout);
  // act(gate) is computed in f32 and rounded to out's dtype before the multiply (as transformers);
  // kClampedSwiglu as its comment says.
  virtual void act_mul(TensorView out, const TensorView& gate_up, Activation act) = 0;
  void silu_mul(TensorView out, const TensorView& gate_up) { act_mul(out, gate_up, Activation::kSilu); }
  // In place on x[rows, N]: x[r, c] = x[r, c] + bias[c], rounded to x's dtype (a Linear's bias).
  virtual void add_bias(TensorView x, const TensorView& bias) = 0;
  // out = x * s elementwise, rounded to out's dtype (s is used as given: a caller that wants
  // transformers' scalar-in-dtype product rounds s first).
  virtual void scale(TensorView out, const TensorView& x, float s) = 0;
  // In place: x = cap * tanh(x / cap) as transformers computes it in x's dtype: x / cap, tanh and
  // * cap each rounded to the dtype (the final logit soft-cap of Gemma 2).
  virtual void softcap(TensorView x, float cap) = 0;
  // out[T, H] = table[ids[t]] for ids[T] (i32)
  virtual void embedding(TensorView out, const TensorView& table, const TensorView& ids) = 0;

  // Scatter new k/v rows [T, num_kv_heads, head_dim] into caches [num_blocks, block_size, num_kv_heads,
  // head_dim] at slot_mapping[T] (i64; -1 = skip). Caches are k's dtype, or f8_e4m3 (the FP8 KV cache:
  // each element stored as e4m3(x / scale), KvScales above).
  virtual void write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k,
                        const TensorView& v, const TensorView& slot_mapping, const KvScales& scales = {}) = 0;
  // Varlen paged attention for prefill, decode and mixed batches.
  //   out, q: [T, num_heads, head_dim]; caches as in write_kv (q's dtype, or f8_e4m3 read as
  //   float(stored) * params.kv_scales). GQA: query head h reads kv head h / (num_heads / num_kv_heads).
  virtual void attention(TensorView out, const TensorView& q, const TensorView& k_cache,
                         const TensorView& v_cache, const AttentionParams& params) = 0;

  // ----- fused ops: the default bodies compose the ops above and are the CPU twins; a device
  // overrides them with one kernel that rounds at the same points.

  // hidden = hidden + delta (rounded to hidden's dtype), then normed = rms_norm(hidden) with w.
  // hidden, delta, normed: [rows, D].
  virtual void add_rms_norm(TensorView hidden, TensorView normed, const TensorView& delta, const TensorView& w,
                            float eps, NormWeight mode) {
    add(hidden, hidden, delta);
    rms_norm(normed, hidden, w, eps, mode);
  }
  // last[r] = rms_norm(round(hidden[rows[r]] + delta[rows[r]])) with w: the last block's residual add,
  // the gather of the rows that sample and the final norm. hidden, delta [T, D]; rows [R] i32 in
  // [0, T); last [R, D]. hidden's rows afterwards are unspecified (the default body adds delta into
  // all of them; a device that gathers first leaves them as they were).
  virtual void add_gather_rms_norm(TensorView last, TensorView hidden, const TensorView& delta, const TensorView& rows,
                                   const TensorView& w, float eps, NormWeight mode) {
    add(hidden, hidden, delta);
    embedding(last, hidden, rows);
    rms_norm(last, last, w, eps, mode);
  }
  // The attention prologue of one layer, in place on q [T, nH, hd] and k [T, nKV, hd] (views into
  // the fused qkv rows): per-head rms_norm of q with q_norm[hd] and of k with k_norm[hd] (skipped
  // when q_norm is an empty view, data == nullptr: models without q/k norms), RoPE at positions[T], then k and v
  // [T, nKV, hd] are written to the caches at slot_mapping (as write_kv, with its scales).
  virtual void qk_norm_rope_write_kv(TensorView q, TensorView k, const TensorView& v, const TensorView& q_norm,
                                     const TensorView& k_norm, float eps, NormWeight mode,
                                     const TensorView& positions, const TensorView& inv_freq,
                                     float attention_scaling, TensorView k_cache, TensorView v_cache,
                                     const TensorView& slot_mapping, const KvScales& scales = {}) {
    if (q_norm.data != nullptr) {
      rms_norm(q, q, q_norm, eps, mode);
      rms_norm(k, k, k_norm, eps, mode);
    }
    rope(q, positions, inv_freq, attention_scaling);
    rope(k, positions, inv_freq, attention_scaling);
    write_kv(k_cache, v_cache, k, v, slot_mapping, scales);
  }

  // ---- Hybrid models (Qwen3.5 / Qwen3-Next). Backends without them CHECK-fail when called.
  // Causal depthwise conv1d + SiLU with a rolling state per sequence:
  //   x [T, C] (rows may be strided), weight [C, K] (weight dtype), conv_state [num_slots, C, K-1]
  //   (activation dtype: a sequence's last K-1 inputs before this step), out [T, C].
  //   out[t, c] = silu(sum_j weight[c, j] * u[c, t-(K-1)+j]) over u = [state | x]; the sum is rounded
  //   to out's dtype before the SiLU (as torch's conv1d then silu). The state then keeps the last K-1 of u.
  virtual void gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                          const GdnParams& params) {
    CHECK_MSG(false, "[{}] gdn_conv1d is not implemented on this backend", name());
  }
  // The gated delta rule in f32 with its gates (spec/models.md B.7-B.10):
  //   q, k [T, Hk, dk] and v [T, Hv, dv] (the conv output, rows may be strided); a, b [T, Hv] (raw
  //   projections); A_log, dt_bias [Hv] f32; state [num_slots, Hv, dk, dv] f32; out [T, Hv, dv].
  //   q, k are L2-normalised (eps 1e-6 inside the sqrt), q scaled by dk^-0.5; beta = sigmoid(b) (rounded
  //   to b's dtype); g = -exp(A_log) * softplus(a + dt_bias); value head h reads key head h / (Hv / Hk);
  //   each output row is read from the state after that token's update.
  virtual void gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& a, const TensorView& b, const TensorView& A_log,
                              const TensorView& dt_bias, TensorView state, const GdnParams& params) {
    CHECK_MSG(false, "[{}] gdn_delta_rule is not implemented on this backend", name());
  }
  // Per row of x [rows, D]: out = cast(cast(w * cast(x * rsqrt(mean(x^2) + eps))) * silu(z)), plain
  // weight w [D], norm before gate (the GDN output norm); z has x's rows (may be strided).
  virtual void gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w,
                              float eps) {
    CHECK_MSG(false, "[{}] gated_rms_norm is not implemented on this backend", name());
  }
  // out = x * cast(sigmoid(gate)), elementwise; gate rows have x's width, or width 1 (one gate per row).
  virtual void sigmoid_mul(TensorView out, const TensorView& x, const TensorView& gate) {
    CHECK_MSG(false, "[{}] sigmoid_mul is not implemented on this backend", name());
  }
  // out[row_ids[i]] = cast(out[row_ids[i]] + cast(weights[i] * x[i])) for i < N, in order: the MoE
  // combine. x [N, H], row_ids [N] i32, weights [N] f32, out [rows, H].
  virtual void add_rows_scaled(TensorView out, const TensorView& x, const TensorView& row_ids,
                               const TensorView& weights) {
    CHECK_MSG(false, "[{}] add_rows_scaled is not implemented on this backend", name());
  }

  // ---- Mixture of experts on the device (model/moe_ffn.h): routing, grouping by expert, one grouped
  // GEMM launch per projection and the weighted combine, none of which reads anything back to the
  // host, with launch grids fixed by T (so decode steps are graph-capturable). Pairs: token t's
  // slot j is pair p = t * k + j.
  //
  // Router logits [T, E] (f32/bf16/f16) -> topk_ids [T, k] i32 and topk_weights [T, k] f32, slots in
  // selection order (largest first, ties to the lower expert), the weights computed in f32 and
  // rounded to the logits' dtype. kSoftmaxTopK: p = softmax(logits) (max-subtracted, summed in
  // expert order), weights p_j, or p_j / (p_0 + ... + p_{k-1}) when renormalize; kTopKSoftmax:
  // weights = softmax over the k selected logits (summed in slot order).
  virtual void moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
                         bool renormalize) {
    CHECK_MSG(false, "[{}] moe_route is not implemented on this backend", name());
  }
  // Groups the pairs by expert in a fixed-capacity layout of tiles of kMoeTileRows rows:
  //   tile_pairs [num_tiles, kMoeTileRows] i32: each expert's pairs in ascending pair order, from the
  //   start of a tile, its last tile padded with -1; tiles after the used ones are all -1;
  //   tile_experts [num_tiles] i32: the expert of each used tile, -1 for the others.
  // num_tiles must be at least moe_max_tiles(T * k, num_experts); topk_ids [T, k] i32 in [0, E).
  virtual void moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids,
                         int64_t num_experts) {
    CHECK_MSG(false, "[{}] moe_group is not implemented on this backend", name());
  }
  // moe_route, then moe_group of its topk_ids over E = logits.size(1) experts: the same results, which
  // a backend may compute in one launch (decode steps of a few tokens).
  virtual void moe_route_group(TensorView topk_ids, TensorView topk_weights, TensorView tile_pairs,
                               TensorView tile_experts, const TensorView& logits, MoeRouting routing,
                               bool renormalize) {
    moe_route(topk_ids, topk_weights, logits, routing, renormalize);
    moe_group(tile_pairs, tile_experts, topk_ids, logits.size(1));
  }
  // The grouped expert product, one launch for all experts: for every pair p in tile_pairs, with e
  // its tile's expert and x row r = p / pairs_per_x_row,
  //   y = round(x[r] . W_e^T) (+ bias[e], rounded) as matmul (or matmul_mxfp4) then add_bias do;
  //   act == nullopt: out[p] = y; else y holds gate | up (N = 2 * out width, gate rows first) and
  //   out[p] = act_mul(y) as the op act_mul computes it.
  // out [T * k, out width] (x's dtype), x [rows, K]; each row's result does not depend on the other
  // rows (batch invariant). Rows of out whose pair is in no tile are left as they are.
  virtual void moe_expert_gemm(TensorView out, const TensorView& x, const MoeExpertWeights& w,
                               const TensorView& tile_pairs, const TensorView& tile_experts, int64_t pairs_per_x_row,
                               std::optional<Activation> act) {
    CHECK_MSG(false, "[{}] moe_expert_gemm is not implemented on this backend", name());
  }
  // The combine, in place on out [T, H]: for each token, its slots in ascending expert order,
  //   out[t] = round(out[t] + round(topk_weights[t, j] * y[t * k + j])), y [T * k, H],
  // from out's rows (accumulate) or from +0 (out is only written: the MoE block without a shared expert,
  // transformers' index_add into a zero tensor, without a launch to zero it first).
  // (Ascending experts: the order transformers' per-expert index_add uses; fixed, so deterministic and
  // batch invariant.)
  virtual void moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids,
                           const TensorView& topk_weights, bool accumulate) {
    CHECK_MSG(false, "[{}] moe_combine is not implemented on this backend", name());
  }

  // moe_combine into out, then add_rms_norm(hidden, normed, out, w): the MoE block's combine fused with
  // the residual add and the norm that opens the next block. out, hidden, normed [T, H].
  virtual void moe_combine_add_rms_norm(TensorView out, TensorView hidden, TensorView normed, const TensorView& y,
                                        const TensorView& topk_ids, const TensorView& topk_weights, bool accumulate,
                                        const TensorView& w, float eps, NormWeight mode) {
    moe_combine(out, y, topk_ids, topk_weights, accumulate);
    add_rms_norm(hidden, normed, out, w, eps, mode);
  }

  // ids[R] (i32) = argmax over logits[R, V].
  virtual void argmax(TensorView ids, const TensorView& logits) = 0;
  // out[R, V] (f32) = log_softmax(logits[R, V]) in f32.
  virtual void log_softmax(TensorView out, const TensorView& logits) = 0;
  // Temperature / top-k / top-p / min-p sampling of logits[R, V] (sampling_math.h says exactly
  // which token): ids[R] (i32) of rows whose params have temperature > 0 are overwritten, the
  // others keep what they hold (argmax ids, or rows the host samples). params: [R, 24] u8, one
  // sampling::RowParams per row, on the op's device; its uniform comes from the host, so a draw
  // stays counter-based (same seed and count, same token, in any batch). Rows with penalties are
  // sampled from apply_penalties' output; logprobs come from logprobs() below.
  // The default body is the CPU twin (host views).
  virtual void sample(TensorView ids, const TensorView& logits, const TensorView& params) {
    sample_rows_on_host(ids, logits, params);
  }
  // Repetition / presence / frequency penalties (sampling_math.h says exactly how) on copies of some
  // logits rows: out[P, V] f32 row p = logits row rows[p].logits_row widened to f32, then every
  // distinct id of row p's history penalised once. f32 because sample_token penalises the widened
  // row: rounding back to bf16 would move ties and draws. The raw logits stay as they are (logprobs
  // read them). rows: [P, 32] u8, one sampling::PenaltyRow each; history: [H] i32, the rows' prompt +
  // output ids back to back; all on the op's device. Deterministic: occurrences are counted with
  // integer adds, and each distinct id is written by one thread.
  virtual void apply_penalties(TensorView out, const TensorView& logits, const TensorView& rows,
                               const TensorView& history) {
    apply_penalties_on_host(out, logits, rows, history);
  }
  // Logprobs of the raw logits' log-softmax (sampling_math.h), so only (id, logprob) pairs leave the
  // device. For L rows (rows: [L, 12] u8, one sampling::LogprobRow each) of logits [R, V]:
  //   out_ids [L, 1 + K] i32, out_logprobs [L, 1 + K] f32 (K <= kMaxTopLogprobs):
  //   column 0 = the sampled token ids[rows[l].id_index] (ids: [N] i32) and its logprob;
  //   columns 1 ..= k = the k = min(num_top, K, V) most likely tokens, best first (ties: lower id);
  //   the columns after them hold id -1, logprob 0.
  virtual void logprobs(TensorView out_ids, TensorView out_logprobs, const TensorView& logits, const TensorView& ids,
                        const TensorView& rows) {
    logprobs_on_host(out_ids, out_logprobs, logits, ids, rows);
  }
  // Structured outputs: for i < N, logits row rows[i] keeps the tokens whose bit is set in bitmask
  // row i and becomes -inf elsewhere (bit v % 32 of word v / 32; a grammar matcher's mask).
  // logits [R, V] (float dtype, in place), bitmask [N, ceil(V / 32)] i32, rows [N] i32; on the op's
  // device. A row whose mask allows nothing is left -inf everywhere (the caller never sends one).
  virtual void apply_token_bitmask(TensorView logits, const TensorView& bitmask, const TensorView& rows) {
    apply_token_bitmask_on_host(logits, bitmask, rows);
  }
  // logit_bias: for k < K, logits[row_k][token_k] += bias_k, rounded to the logits' dtype, in order
  // (a repeated (row, token) adds twice). entries [K, 3] i32: row, token, bias as f32 bits.
  virtual void add_logit_bias(TensorView logits, const TensorView& entries) { add_logit_bias_on_host(logits, entries); }

  // ---- Tensor parallelism: the group this device's rank computes in (nullptr: the device alone).
  // Set once, before the model shard loads (model/tensor_parallel_model.h); the layers read it to
  // load their shard and to reduce their partial outputs.
  Communicator* communicator() const { return communicator_.get(); }
  void set_communicator(std::unique_ptr<Communicator> communicator) { communicator_ = std::move(communicator); }
  int tensor_parallel_rank() const { return communicator_ ? communicator_->rank() : 0; }
  int tensor_parallel_size() const { return communicator_ ? communicator_->size() : 1; }

 private:
  std::unique_ptr<Communicator> communicator_;
};

// Names of the backends this build has ("cpu", and "cuda" when built with CUDA).
std::vector<std::string> available_backends();
// "cpu", "cuda", or "auto" (cuda when built in and a GPU is there, else cpu); a clear error when the
// device is unknown or not built in.
Expected<std::unique_ptr<Backend>> make_backend(const std::string& device);
// The backend of rank `rank` of a group of processes (--nnodes): make_backend's, where a GPU is GPU
// rank % (the GPUs this process sees), so ranks on one host take a GPU each (CUDA_VISIBLE_DEVICES
// picks otherwise).
Expected<std::unique_ptr<Backend>> make_process_rank_backend(const std::string& device, int rank);
class TcpGroup;
// The communicator of this process's rank of `group`: over the group's TCP connections on the CPU
// (cpu/tcp_communicator.h), NCCL on CUDA (its id sent over them).
Expected<std::unique_ptr<Communicator>> make_process_communicator(Backend& backend,
                                                                  const std::shared_ptr<TcpGroup>& group);
// Tensor parallelism: the backends of ranks 1..size-1 beside `rank0` (the same kind: CPU ranks are
// threads; CUDA ranks on GPUs 1..size-1, or all on rank 0's GPU when share_device, the multi-rank
// path on one card), each rank's communicator set on its backend (rank 0's too). `communicator` picks
// the collectives of CUDA ranks on GPUs of their own: "peer" (kernels over peer memory), "nccl", or
// "auto" (peer where every pair of GPUs has peer access, else NCCL).
Expected<std::vector<std::unique_ptr<Backend>>> make_tensor_parallel_group(Backend& rank0, int size, bool share_device,
                                                                          const std::string& communicator = "auto");

}  // namespace pagellm
