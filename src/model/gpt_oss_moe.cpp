// gpt-oss's MoE block weights (MoeStyle::kGptOss), as transformers' GptOssMLP holds them:
//   router.weight [E, H], router.bias [E]
//   experts.gate_up_proj [E, H, 2I] with gate and up interleaved along the last dim (gate = [..., ::2],
//   up = [..., 1::2]), experts.gate_up_proj_bias [E, 2I] (interleaved alike), experts.down_proj
//   [E, I, H], experts.down_proj_bias [E, H];
// or, as released (quantization_config mxfp4), experts.{gate_up,down}_proj_blocks [E, out, in / 32, 16]
// U8 and _scales [E, out, in / 32] U8 (integrations/mxfp4.py: row `out` of the blocks is column `out`
// of the dense parameter), kept 4-bit (Backend::matmul_mxfp4).
// The experts are stacked (moe_ffn.h ExpertStack): gate | up rows de-interleaved (gate rows first).
#include <cstring>

#include <fmt/format.h>

#include "model/gdn_mixer.h"
#include "model/moe_ffn.h"

namespace pagellm {

namespace {

// Where row j of the de-interleaved [gate | up] stack of width 2I comes from in the interleaved one.
int64_t interleaved_row(int64_t j, int64_t width) { return j < width ? 2 * j : 2 * (j - width) + 1; }

Expected<const TensorInfo*> raw_u8(const WeightLoader& loader, const std::string& name, const std::vector<int64_t>& shape) {
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, loader.raw(name, shape));
  if (info->dtype != DType::kU8)
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected U8 (MXFP4)", name, dtype_name(info->dtype));
  return info;
}

// A [E, rows, row_bytes] U8 tensor, each expert's rows de-interleaved when asked.
Tensor stacked_rows_u8(const TensorInfo& info, int64_t num_experts, int64_t rows, int64_t row_bytes, bool deinterleave) {
  Tensor host = Tensor::cpu({num_experts, rows, row_bytes}, DType::kU8);
  const auto* src = static_cast<const uint8_t*>(info.data);
  for (int64_t e = 0; e < num_experts; ++e)
    for (int64_t j = 0; j < rows; ++j) {
      const int64_t from = deinterleave ? interleaved_row(j, rows / 2) : j;
      std::memcpy(host.ptr<uint8_t>() + (e * rows + j) * row_bytes, src + (e * rows + from) * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  return host;
}

Expected<ExpertStack> mxfp4_stack(WeightLoader& loader, const std::string& name, int64_t num_experts,
                                  int64_t out_features, int64_t in_features, bool deinterleave) {
  if (in_features % kMxfp4Group != 0)
    return invalid_argument("[checkpoint] {}: MXFP4 needs an input width divisible by 32, got {}", name, in_features);
  const int64_t groups = in_features / kMxfp4Group;
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* blocks,
                           raw_u8(loader, name + "_blocks", {num_experts, out_features, groups, kMxfp4Group / 2}));
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* scales, raw_u8(loader, name + "_scales", {num_experts, out_features, groups}));
  ExpertStack stack;
  stack.weight = loader.upload(stacked_rows_u8(*blocks, num_experts, out_features, in_features / 2, deinterleave));
  stack.scales = loader.upload(stacked_rows_u8(*scales, num_experts, out_features, groups, deinterleave));
  return stack;
}

// A dense [E, in, out] parameter as the stacked [E, out, in] weight (rows de-interleaved when asked).
Tensor dense_stack(Backend& backend, const std::vector<float>& all, int64_t num_experts, int64_t in_features,
                   int64_t out_features, bool deinterleave, DType dtype) {
  std::vector<float> w(static_cast<size_t>(num_experts * out_features * in_features));
  for (int64_t e = 0; e < num_experts; ++e) {
    const float* src = all.data() + e * in_features * out_features;
    float* dst = w.data() + e * out_features * in_features;
    for (int64_t j = 0; j < out_features; ++j) {
      const int64_t from = deinterleave ? interleaved_row(j, out_features / 2) : j;
      for (int64_t k = 0; k < in_features; ++k) dst[j * in_features + k] = src[k * out_features + from];
    }
  }
  return upload_matrix(backend, w, Shape{num_experts, out_features, in_features}, dtype);
}

// A [E, width] bias, each expert's row de-interleaved when asked.
Tensor bias_stack(Backend& backend, const std::vector<float>& all, int64_t num_experts, int64_t width,
                  bool deinterleave, DType dtype) {
  std::vector<float> b(all.size());
  for (int64_t e = 0; e < num_experts; ++e)
    for (int64_t j = 0; j < width; ++j)
      b[static_cast<size_t>(e * width + j)] =
          all[static_cast<size_t>(e * width + (deinterleave ? interleaved_row(j, width / 2) : j))];
  return upload_matrix(backend, b, Shape{num_experts, width}, dtype);
}

}  // namespace

Expected<MoeWeights> load_gpt_oss_moe_weights(WeightLoader& loader, Backend& backend, const ModelConfig& c,
                                              const std::string& p) {
  const int64_t h = c.hidden_size, num_experts = c.num_experts, width = c.intermediate_size;
  const DType dtype = loader.weight_dtype();
  MoeWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.router.weight, loader.load(p + "router.weight", {num_experts, h}));
  PAGELLM_ASSIGN_OR_RETURN(w.router.bias, loader.load(p + "router.bias", {num_experts}));
  const std::string gate_up = p + "experts.gate_up_proj", down = p + "experts.down_proj";
  const bool mxfp4 = loader.has(gate_up + "_blocks");
  if (mxfp4 && loader.quantization().method != QuantMethod::kMxfp4)
    return invalid_argument("[checkpoint] {}_blocks is an MXFP4 weight, but config.json's quantization_config is {} "
                            "(mxfp4 expected)",
                            gate_up, loader.quantization().describe());
  if (!mxfp4 && loader.quantization().method == QuantMethod::kMxfp4)
    return invalid_argument("[checkpoint] config.json says mxfp4, but {}_blocks is missing", gate_up);
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> gate_up_bias, loader.load_host_f32(gate_up + "_bias", {num_experts, 2 * width}));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> down_bias, loader.load_host_f32(down + "_bias", {num_experts, h}));
  if (mxfp4) {
    PAGELLM_ASSIGN_OR_RETURN(w.gate_up, mxfp4_stack(loader, gate_up, num_experts, 2 * width, h, true));
    PAGELLM_ASSIGN_OR_RETURN(w.down, mxfp4_stack(loader, down, num_experts, h, width, false));
  } else {
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> gate_up_dense, loader.load_host_f32(gate_up, {num_experts, h, 2 * width}));
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> down_dense, loader.load_host_f32(down, {num_experts, width, h}));
    w.gate_up.weight = dense_stack(backend, gate_up_dense, num_experts, h, 2 * width, true, dtype);
    w.down.weight = dense_stack(backend, down_dense, num_experts, width, h, false, dtype);
  }
  w.gate_up.bias = bias_stack(backend, gate_up_bias, num_experts, 2 * width, true, dtype);
  w.down.bias = bias_stack(backend, down_bias, num_experts, h, false, dtype);
  return w;
}

}  // namespace pagellm
