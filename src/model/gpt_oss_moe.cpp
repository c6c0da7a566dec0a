// gpt-oss's MoE block weights (MoeStyle::kGptOss), as transformers' GptOssMLP holds them:
//   router.weight [E, H], router.bias [E]
//   experts.gate_up_proj [E, H, 2I] with gate and up interleaved along the last dim (gate = [..., ::2],
//   up = [..., 1::2]), experts.gate_up_proj_bias [E, 2I] (interleaved alike), experts.down_proj
//   [E, I, H], experts.down_proj_bias [E, H];
// or, as released (quantization_config mxfp4), experts.{gate_up,down}_proj_blocks [E, out, in / 32, 16]
// U8 and _scales [E, out, in / 32] U8 (integrations/mxfp4.py: row `out` of the blocks is column `out`
// of the dense parameter), kept 4-bit (Backend::matmul_mxfp4).
// The experts are stacked (moe_ffn.h ExpertStack): gate | up rows de-interleaved (gate rows first).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "model/gdn_mixer.h"
#include "model/moe_ffn.h"

namespace pagellm {

namespace {

// The rows of the interleaved gate_up stack (width 2I: gate = even rows, up = odd ones) that make this
// shard's de-interleaved [gate | up] rows: gate columns `mine`, then the same up columns.
std::vector<int64_t> gate_up_source_rows(ShardRange mine) {
  std::vector<int64_t> rows;
  for (int64_t parity : {0, 1})
    for (int64_t j = mine.begin; j < mine.begin + mine.count; ++j) rows.push_back(2 * j + parity);
  return rows;
}

std::vector<int64_t> all_rows(int64_t count) {
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) rows[static_cast<size_t>(j)] = j;
  return rows;
}

Expected<const TensorInfo*> raw_u8(const WeightLoader& loader, const std::string& name, const std::vector<int64_t>& shape) {
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, loader.raw(name, shape));
  if (info->dtype != DType::kU8)
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected U8 (MXFP4)", name, dtype_name(info->dtype));
  return info;
}

// A [E, rows, row_bytes] U8 tensor as [E, source_rows, columns.count]: each expert's rows `source_rows`
// in that order, bytes `columns` of each.
Tensor stacked_rows_u8(const TensorInfo& info, int64_t num_experts, int64_t rows, int64_t row_bytes,
                       const std::vector<int64_t>& source_rows, ShardRange columns) {
  const auto out_rows = static_cast<int64_t>(source_rows.size());
  Tensor host = Tensor::cpu({num_experts, out_rows, columns.count}, DType::kU8);
  const auto* src = static_cast<const uint8_t*>(info.data);
  for (int64_t e = 0; e < num_experts; ++e)
    for (int64_t j = 0; j < out_rows; ++j)
      std::memcpy(host.ptr<uint8_t>() + (e * out_rows + j) * columns.count,
                  src + (e * rows + source_rows[static_cast<size_t>(j)]) * row_bytes + columns.begin,
                  static_cast<size_t>(columns.count));
  return host;
}

// `inputs`: the input columns the shard keeps (whole groups of 32).
Expected<ExpertStack> mxfp4_stack(WeightLoader& loader, const std::string& name, int64_t num_experts,
                                  int64_t out_features, int64_t in_features, const std::vector<int64_t>& source_rows,
                                  ShardRange inputs) {
  if (in_features % kMxfp4Group != 0)
    return invalid_argument("[checkpoint] {}: MXFP4 needs an input width divisible by 32, got {}", name, in_features);
  const int64_t groups = in_features / kMxfp4Group;
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* blocks,
                           raw_u8(loader, name + "_blocks", {num_experts, out_features, groups, kMxfp4Group / 2}));
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* scales, raw_u8(loader, name + "_scales", {num_experts, out_features, groups}));
  ExpertStack stack;
  stack.weight = loader.upload(stacked_rows_u8(*blocks, num_experts, out_features, in_features / 2, source_rows,
                                               {inputs.begin / 2, inputs.count / 2}));
  Tensor host_scales = stacked_rows_u8(*scales, num_experts, out_features, groups, source_rows,
                                       {inputs.begin / kMxfp4Group, inputs.count / kMxfp4Group});
  // The scales' bounds (backend.h MoeExpertWeights): a backend may then convert without the general path.
  const uint8_t* bytes = host_scales.ptr<uint8_t>();
  const auto [low, high] = std::minmax_element(bytes, bytes + host_scales.numel());
  if (host_scales.numel() > 0) stack.scale_min = *low, stack.scale_max = *high;
  stack.scales = loader.upload(std::move(host_scales));
  return stack;
}

// A dense [E, in, out] parameter as the stacked [E, source_rows, inputs.count] weight: output columns
// `source_rows`, input rows `inputs`.
Tensor dense_stack(Backend& backend, const std::vector<float>& all, int64_t num_experts, int64_t in_features,
                   int64_t out_features, const std::vector<int64_t>& source_rows, ShardRange inputs, DType dtype) {
  const auto out_rows = static_cast<int64_t>(source_rows.size());
  std::vector<float> w(static_cast<size_t>(num_experts * out_rows * inputs.count));
  for (int64_t e = 0; e < num_experts; ++e) {
    const float* src = all.data() + e * in_features * out_features;
    float* dst = w.data() + e * out_rows * inputs.count;
    for (int64_t j = 0; j < out_rows; ++j)
      for (int64_t k = 0; k < inputs.count; ++k)
        dst[j * inputs.count + k] = src[(inputs.begin + k) * out_features + source_rows[static_cast<size_t>(j)]];
  }
  return upload_matrix(backend, w, Shape{num_experts, out_rows, inputs.count}, dtype);
}

// A [E, width] bias as [E, source_rows].
Tensor bias_stack(Backend& backend, const std::vector<float>& all, int64_t num_experts, int64_t width,
                  const std::vector<int64_t>& source_rows, DType dtype) {
  std::vector<float> b;
  for (int64_t e = 0; e < num_experts; ++e)
    for (int64_t j : source_rows) b.push_back(all[static_cast<size_t>(e * width + j)]);
  return upload_matrix(backend, b, Shape{num_experts, static_cast<int64_t>(source_rows.size())}, dtype);
}

}  // namespace

Expected<ShardRange> gpt_oss_expert_shard(int64_t width, int rank, int size) {
  if (size == 1) return ShardRange{0, width};
  if (width % kMxfp4Group != 0 || width / kMxfp4Group < size)
    return invalid_argument("[model] --tensor-parallel-size {}: gpt-oss experts of width {} split in whole groups of "
                            "{} columns (MXFP4's blocks), which leaves a rank none", size, width, kMxfp4Group);
  const ShardRange groups = shard_range(width / kMxfp4Group, rank, size);
  return ShardRange{groups.begin * kMxfp4Group, groups.count * kMxfp4Group};
}

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
  // A tensor-parallel rank keeps its columns of each expert's width: gate and up rows with their biases,
  // down's input columns; down's bias joins the partial sums on rank 0 only.
  PAGELLM_ASSIGN_OR_RETURN(const ShardRange mine, gpt_oss_expert_shard(width, loader.tp_rank(), loader.tp_size()));
  const std::vector<int64_t> gate_up_rows = gate_up_source_rows(mine), down_rows = all_rows(h);
  if (mxfp4) {
    PAGELLM_ASSIGN_OR_RETURN(w.gate_up, mxfp4_stack(loader, gate_up, num_experts, 2 * width, h, gate_up_rows, {0, h}));
    PAGELLM_ASSIGN_OR_RETURN(w.down, mxfp4_stack(loader, down, num_experts, h, width, down_rows, mine));
  } else {
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> gate_up_dense, loader.load_host_f32(gate_up, {num_experts, h, 2 * width}));
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> down_dense, loader.load_host_f32(down, {num_experts, width, h}));
    w.gate_up.weight = dense_stack(backend, gate_up_dense, num_experts, h, 2 * width, gate_up_rows, {0, h}, dtype);
    w.down.weight = dense_stack(backend, down_dense, num_experts, width, h, down_rows, mine, dtype);
  }
  w.gate_up.bias = bias_stack(backend, gate_up_bias, num_experts, 2 * width, gate_up_rows, dtype);
  if (loader.tp_rank() == 0) w.down.bias = bias_stack(backend, down_bias, num_experts, h, down_rows, dtype);
  return w;
}

}  // namespace pagellm
