// GdnMixer: the Gated DeltaNet token mixer of Qwen3.5 / Qwen3-Next (spec/models.md B.5-B.11).
//
//   normed [T, H] ─ in_proj ─▶ [ q | k | v (conv_dim) | z (value_dim) | b (Hv) | a (Hv) ]   one GEMM
//   q|k|v ─ conv1d + SiLU (conv state) ─▶ q [T, Hk, dk], k [T, Hk, dk], v [T, Hv, dv]
//   delta rule (f32 state, gates from a, b, A_log, dt_bias) ─▶ o [T, Hv, dv]
//   gated RMSNorm(o, z; plain w) ─ out_proj ─▶ out [T, H]
//
// Both checkpoint layouts load into that one fused in_proj: Qwen3.5's separate in_proj_qkv / z / b / a
// stack as they are; Qwen3-Next's in_proj_qkvz / in_proj_ba, grouped per key head, are regrouped at load
// (a pure row permutation).
#pragma once

#include <string>

#include "io/model_config.h"
#include "model/activations.h"
#include "model/layers/linear.h"
#include "model/step_batch.h"
#include "model/weights.h"

namespace pagellm {

struct GdnWeights {
  layers::Linear in_proj;   // [conv_dim + value_dim + 2 Hv, H]  rows: q | k | v | z | b | a
  Tensor conv1d;    // [conv_dim, K]
  Tensor a_log;     // [Hv], f32
  Tensor dt_bias;   // [Hv], f32
  Tensor norm;      // [dv], plain weight
  layers::Linear out_proj;  // [H, value_dim]
};

// Sizes of the GDN layers of a config.
struct GdnShape {
  int64_t hidden = 0, num_k_heads = 0, num_v_heads = 0, dk = 0, dv = 0, conv_kernel = 0;
  GdnShape() = default;
  explicit GdnShape(const ModelConfig& c)
      : hidden(c.hidden_size), num_k_heads(c.linear_num_key_heads), num_v_heads(c.linear_num_value_heads),
        dk(c.linear_key_head_dim), dv(c.linear_value_head_dim), conv_kernel(c.linear_conv_kernel_dim) {}
  int64_t key_dim() const { return num_k_heads * dk; }
  int64_t value_dim() const { return num_v_heads * dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t in_proj_rows() const { return conv_dim() + value_dim() + 2 * num_v_heads; }
};

// The GDN heads rank `rank` of `size` computes (tensor parallelism): num_v_heads / size value heads
// from v_head_begin and the key heads they read, num_k_heads / size from k_head_begin, or, with fewer
// key heads than ranks, the one key head of its value heads (replicated, as KV heads of attention).
// local is the shard's shape: its conv channels (q, k, v of its heads), gates and state hold its heads only.
struct GdnShard {
  GdnShape local;
  int64_t k_head_begin = 0, v_head_begin = 0;
};
// A one-line error when the heads do not split over `size` ranks.
Expected<GdnShard> gdn_shard(const GdnShape& shape, int rank, int size);

// Loads the GDN weights under `prefix` ("model.layers.3.linear_attn."), either checkpoint layout;
// matrices end up in `weight_dtype`, A_log and dt_bias in f32. `shape` is the whole model's; a
// tensor-parallel loader loads its shard (gdn_shard): the in_proj rows and conv1d channels of its heads,
// their A_log and dt_bias, and out_proj's input columns of its value heads (out_proj's output is then a
// partial sum).
Expected<GdnWeights> load_gdn_weights(WeightLoader& loader, Backend& backend, DType weight_dtype,
                                      const GdnShape& shape, const std::string& prefix);

// A host f32 [rows, cols] matrix as a backend tensor of `dtype` (for weights rearranged at load).
Tensor upload_matrix(Backend& backend, const std::vector<float>& host, Shape shape, DType dtype);

class GdnMixer {
 public:
  // `local` is this rank's shard of the heads (the whole shape without tensor parallelism).
  GdnMixer(const GdnShape& local, float eps, Backend& backend, DType dtype);
  // out[T, H] = the mixer of normed[T, H]; reads and updates the batch's state slots in `state`.
  void forward(const GdnWeights& weights, const StepBatch& batch, const GdnStateView& state,
               const TensorView& normed, TensorView out);

 private:
  GdnShape shape_;
  float eps_;
  Backend& backend_;
  Activations act_;
};

}  // namespace pagellm
