// The CPU backend: the readable reference every other backend is compared with.
// Weights are expected in f32 (widened at load); activations may be f32, bf16 or f16 and every op
// rounds its output to the output's dtype, which reproduces transformers' rounding points.
#pragma once

#include "backend/backend.h"

namespace pagellm {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }
  // bf16 checkpoints keep bf16 weights (the GEMM widens them exactly as it reads, so results are
  // the same bits as with f32 copies, from half the bytes); others widen to f32.
  DType weight_dtype(DType activation) const override { return activation == DType::kBF16 ? DType::kBF16 : DType::kF32; }
  int64_t free_memory_bytes() const override;  // MemAvailable of /proc/meminfo
  Tensor alloc(Shape shape, DType dtype) override;
  void copy(TensorView dst, const TensorView& src) override;
  void synchronize() override {}

  void matmul(TensorView out, const TensorView& x, const TensorView& w) override;
  void matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                        int64_t block_n, int64_t block_k) override;
  void matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales) override;
  void matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                   const TensorView& zeros, int64_t group_size) override;
  void quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) override;
  void rms_norm(TensorView out, const TensorView& x, const TensorView& w, float eps,
                NormWeight mode) override;
  void add(TensorView out, const TensorView& a, const TensorView& b) override;
  void rope(TensorView x, const TensorView& positions, const TensorView& inv_freq,
            float attention_scaling) override;
  void act_mul(TensorView out, const TensorView& gate_up, Activation act) override;
  void add_bias(TensorView x, const TensorView& bias) override;
  void scale(TensorView out, const TensorView& x, float s) override;
  void softcap(TensorView x, float cap) override;
  void embedding(TensorView out, const TensorView& table, const TensorView& ids) override;
  void write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k, const TensorView& v,
                const TensorView& slot_mapping, const KvScales& scales = {}) override;
  void attention(TensorView out, const TensorView& q, const TensorView& k_cache,
                 const TensorView& v_cache, const AttentionParams& params) override;
  void gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                  const GdnParams& params) override;
  void gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& a, const TensorView& b, const TensorView& A_log, const TensorView& dt_bias,
                      TensorView state, const GdnParams& params) override;
  void gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w,
                      float eps) override;
  void sigmoid_mul(TensorView out, const TensorView& x, const TensorView& gate) override;
  void add_rows_scaled(TensorView out, const TensorView& x, const TensorView& row_ids,
                       const TensorView& weights) override;
  void moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
                 bool renormalize) override;
  void moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids,
                 int64_t num_experts) override;
  void moe_expert_gemm(TensorView out, const TensorView& x, const MoeExpertWeights& w, const TensorView& tile_pairs,
                       const TensorView& tile_experts, int64_t pairs_per_x_row, std::optional<Activation> act) override;
  void moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids,
                   const TensorView& topk_weights, bool accumulate) override;
  void argmax(TensorView ids, const TensorView& logits) override;
  void log_softmax(TensorView out, const TensorView& logits) override;
};

}  // namespace pagellm
