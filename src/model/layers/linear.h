// Linear: y = x W^T (+ b), the one home of a projection's weights. Fused projections (q|k|v,
// gate|up) are one Linear whose rows stack the checkpoint's tensors, so each layer launches few
// GEMMs. The weight is dense (the backend's weight dtype) or quantized (quant_formats.h: block-scaled
// FP8, or INT4 from AWQ / GPTQ repacked into one layout); the model files never see the difference.
// Tensor-parallel shards are slices chosen at load (LinearPart rows, InputColumns).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/weights.h"

namespace pagellm::layers {

enum class WeightFormat { kDense, kFp8Block, kInt4, kMxfp4 };

struct Linear {
  WeightFormat format = WeightFormat::kDense;
  // kDense: [N, K] in the backend's weight dtype; kFp8Block: [N, K] f8_e4m3; kInt4: qweight [N, K / 8] i32;
  // kMxfp4: blocks [N, K / 2] u8 (backend.h matmul_mxfp4; gpt-oss's experts, loaded by model/gpt_oss_moe).
  Tensor weight;
  Tensor scales;  // kFp8Block: [ceil(N / block_n), ceil(K / block_k)] f32; kInt4: [N, K / block_k] f32;
                  // kMxfp4: [N, K / 32] u8 e8m0
  Tensor zeros;   // kInt4: [N, K / block_k] u8
  int64_t block_n = 0, block_k = 0;  // FP8 scale blocks; INT4: block_k is the group size
  Tensor bias;    // [out_features], or undefined when the projection has none

  int64_t out_features() const { return weight.size(0); }
  // out[T, out_features] = x[T, in_features] . W^T (+ bias)
  void forward(Backend& backend, TensorView out, const TensorView& x) const;
};

// One part of a (possibly fused) projection: checkpoint prefix ("model.layers.0.self_attn.q_proj")
// and its number of output rows; a column-parallel shard (tensor parallelism) keeps rows
// [row_begin, row_begin + row_count) of it (-1: all).
struct LinearPart {
  std::string prefix;
  int64_t out_features = 0;
  int64_t row_begin = 0, row_count = -1;
};

// The input columns a row-parallel shard keeps (tensor parallelism: its output is a partial sum the
// ranks add up; the bias joins on rank 0 only). count -1: all.
struct InputColumns {
  int64_t begin = 0, count = -1;
  bool all() const { return count < 0; }
};

// A tensor-parallel shard's pieces (the whole tensor when the loader's group has one rank, so an
// unsharded load stays exactly as it was): rows `range` of a part, columns `range` of the input.
LinearPart shard_rows(const WeightLoader& loader, std::string prefix, int64_t out_features, ShardRange range);
InputColumns shard_columns(const WeightLoader& loader, ShardRange range);

// Loads each part stacked by rows ([sum out, in_features]), and prefix.bias of each part when
// with_bias; a tensor-parallel shard loads only its rows of each part and its `columns`. A part stored quantized (prefix.weight in F8_E4M3 with prefix.weight_scale_inv, or
// prefix.qweight / qzeros / scales) is read as the loader's quantization_config says; the parts of
// one Linear must share a format.
Expected<Linear> load_linear(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features,
                             bool with_bias, InputColumns columns = {});

}  // namespace pagellm::layers
