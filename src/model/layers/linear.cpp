#include "model/layers/linear.h"

#include <cstring>

#include "model/quant_formats.h"

namespace pagellm::layers {

void Linear::forward(Backend& backend, TensorView out, const TensorView& x) const {
  switch (format) {
    case WeightFormat::kDense:
      if (bias.defined()) return backend.matmul_bias(out, x, weight, bias);  // one launch where it can
      backend.matmul(out, x, weight);
      break;
    case WeightFormat::kFp8Block: backend.matmul_fp8_block(out, x, weight, scales, block_n, block_k); break;
    case WeightFormat::kInt4: backend.matmul_int4(out, x, weight, scales, zeros, block_k); break;
    case WeightFormat::kMxfp4: backend.matmul_mxfp4(out, x, weight, scales); break;
  }
  if (bias.defined()) backend.add_bias(out, bias);
}

namespace {

WeightFormat stored_format(const WeightLoader& loader, const std::string& prefix) {
  if (loader.find(prefix + ".qweight") != nullptr) return WeightFormat::kInt4;
  const TensorInfo* weight = loader.find(prefix + ".weight");
  return weight != nullptr && weight->dtype == DType::kF8E4M3 ? WeightFormat::kFp8Block : WeightFormat::kDense;
}

template <typename T>
Expected<std::vector<T>> read_as(const WeightLoader& loader, const std::string& name, const std::vector<int64_t>& shape,
                                 DType want) {
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, loader.raw(name, shape));
  if (info->dtype != want)
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected {}", name, dtype_name(info->dtype),
                            dtype_name(want));
  std::vector<T> out(info->nbytes / sizeof(T));
  std::memcpy(out.data(), info->data, info->nbytes);  // the mapping may not be aligned
  return out;
}

Expected<std::vector<float>> read_f32(const WeightLoader& loader, const std::string& name,
                                      const std::vector<int64_t>& shape) {
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, loader.raw(name, shape));
  if (info->dtype != DType::kF32 && info->dtype != DType::kBF16 && info->dtype != DType::kF16)
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected a float dtype", name,
                            dtype_name(info->dtype));
  std::vector<uint8_t> bytes(info->nbytes);
  std::memcpy(bytes.data(), info->data, info->nbytes);
  std::vector<float> out(info->nbytes / dtype_size_bytes(info->dtype));
  convert_to_f32(bytes.data(), info->dtype, out.data(), out.size());
  return out;
}

Expected<Fp8BlockWeight> read_fp8(const WeightLoader& loader, const LinearPart& part, int64_t in_features) {
  const QuantConfig& q = loader.quantization();
  Fp8BlockWeight w;
  w.rows = part.out_features;
  w.cols = in_features;
  w.block_n = q.block_n;
  w.block_k = q.block_k;
  PAGELLM_ASSIGN_OR_RETURN(w.weight, read_as<uint8_t>(loader, part.prefix + ".weight", {w.rows, w.cols}, DType::kF8E4M3));
  const int64_t block_rows = (w.rows + w.block_n - 1) / w.block_n, block_cols = (w.cols + w.block_k - 1) / w.block_k;
  PAGELLM_ASSIGN_OR_RETURN(w.scales, read_f32(loader, part.prefix + ".weight_scale_inv", {block_rows, block_cols}));
  return w;
}

Expected<Int4Weight> read_int4(const WeightLoader& loader, const LinearPart& part, int64_t in_features) {
  const QuantConfig& q = loader.quantization();
  const int64_t n = part.out_features, k = in_features, g = q.group_size;
  if (k % g != 0 || n % 8 != 0)
    return invalid_argument("[checkpoint] {}: [{} out, {} in] does not fit 4-bit groups of {} (and 8 outputs a word)",
                            part.prefix, n, k, g);
  const std::string& p = part.prefix;
  PackedInt4 packed;
  const bool awq = q.method == QuantMethod::kAwq;
  PAGELLM_ASSIGN_OR_RETURN(packed.qweight, read_as<int32_t>(loader, p + ".qweight",
                                                            awq ? std::vector<int64_t>{k, n / 8} : std::vector<int64_t>{k / 8, n},
                                                            DType::kI32));
  PAGELLM_ASSIGN_OR_RETURN(packed.qzeros, read_as<int32_t>(loader, p + ".qzeros", {k / g, n / 8}, DType::kI32));
  PAGELLM_ASSIGN_OR_RETURN(packed.scales, read_f32(loader, p + ".scales", {k / g, n}));
  if (awq) return unpack_awq(packed, n, k, g, p);
  std::vector<int32_t> g_idx;
  if (loader.find(p + ".g_idx") != nullptr) {
    PAGELLM_ASSIGN_OR_RETURN(g_idx, read_as<int32_t>(loader, p + ".g_idx", {k}, DType::kI32));
  }
  return unpack_gptq(packed, g_idx, n, k, g, q.gptq_v2, p);
}

template <typename T>
Tensor host_tensor(const std::vector<T>& values, Shape shape, DType dtype) {
  Tensor t = Tensor::cpu(shape, dtype);
  CHECK(static_cast<size_t>(shape.numel()) * dtype_size_bytes(dtype) == values.size() * sizeof(T));
  std::memcpy(t.ptr<void>(), values.data(), values.size() * sizeof(T));
  return t;
}

Linear fp8_linear(WeightLoader& loader, const Fp8BlockWeight& w) {
  Linear linear;
  linear.format = WeightFormat::kFp8Block;
  linear.block_n = w.block_n;
  linear.block_k = w.block_k;
  const int64_t block_cols = (w.cols + w.block_k - 1) / w.block_k;
  const int64_t block_rows = static_cast<int64_t>(w.scales.size()) / block_cols;
  linear.weight = loader.upload(host_tensor(w.weight, Shape{w.rows, w.cols}, DType::kF8E4M3));
  linear.scales = loader.upload(host_tensor(w.scales, Shape{block_rows, block_cols}, DType::kF32));
  return linear;
}

Expected<Linear> load_fp8(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features) {
  std::vector<Fp8BlockWeight> read;
  for (const LinearPart& part : parts) {
    PAGELLM_ASSIGN_OR_RETURN(Fp8BlockWeight w, read_fp8(loader, part, in_features));
    read.push_back(std::move(w));
  }
  return fp8_linear(loader, stack_rows(read));
}


// --quantization fp8 on a dense checkpoint: each part's rows quantized in 128 x 128 blocks as they load.
Expected<Linear> quantize_fp8_at_load(WeightLoader& loader, const std::vector<LinearPart>& parts,
                                      int64_t in_features) {
  const QuantConfig& q = loader.quantization();
  std::vector<Fp8BlockWeight> quantized;
  for (const LinearPart& part : parts) {
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> dense,
                             loader.load_host_f32(part.prefix + ".weight", {part.out_features, in_features}));
    quantized.push_back(quantize_fp8_block(dense.data(), part.out_features, in_features, q.block_n, q.block_k));
  }
  return fp8_linear(loader, stack_rows(quantized));
}

Expected<Linear> load_int4(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features) {
  std::vector<Int4Weight> read;
  for (const LinearPart& part : parts) {
    PAGELLM_ASSIGN_OR_RETURN(Int4Weight w, read_int4(loader, part, in_features));
    read.push_back(std::move(w));
  }
  const Int4Weight w = stack_rows(read);
  Linear linear;
  linear.format = WeightFormat::kInt4;
  linear.block_k = w.group_size;
  const int64_t groups = w.cols / w.group_size;
  linear.weight = loader.upload(host_tensor(w.qweight, Shape{w.rows, w.cols / 8}, DType::kI32));
  linear.scales = loader.upload(host_tensor(w.scales, Shape{w.rows, groups}, DType::kF32));
  linear.zeros = loader.upload(host_tensor(w.zeros, Shape{w.rows, groups}, DType::kU8));
  return linear;
}

// The format every part is stored in, checked against the config's quantization_config.
Expected<WeightFormat> parts_format(const WeightLoader& loader, const std::vector<LinearPart>& parts) {
  const WeightFormat format = stored_format(loader, parts[0].prefix);
  for (const LinearPart& part : parts)
    if (stored_format(loader, part.prefix) != format)
      return invalid_argument("[checkpoint] {} and {} are stored in different formats; pagellm fuses them into one "
                              "projection, which needs one format",
                              parts[0].prefix, part.prefix);
  const QuantMethod method = loader.quantization().method;
  if (format == WeightFormat::kInt4 && method != QuantMethod::kAwq && method != QuantMethod::kGptq)
    return invalid_argument("[checkpoint] {}.qweight is a 4-bit weight, but config.json's quantization_config is {} "
                            "(awq or gptq expected)",
                            parts[0].prefix, loader.quantization().describe());
  if (format == WeightFormat::kFp8Block && method != QuantMethod::kFp8)
    return invalid_argument("[checkpoint] {}.weight is stored as F8_E4M3, but config.json's quantization_config is "
                            "{} (fp8 expected)",
                            parts[0].prefix, loader.quantization().describe());
  return format;
}

}  // namespace

LinearPart shard_rows(const WeightLoader& loader, std::string prefix, int64_t out_features, ShardRange range) {
  if (loader.tp_size() == 1) return {std::move(prefix), out_features};
  return {std::move(prefix), out_features, range.begin, range.count};
}

InputColumns shard_columns(const WeightLoader& loader, ShardRange range) {
  if (loader.tp_size() == 1) return {};
  return {range.begin, range.count};
}

Expected<Linear> load_linear(WeightLoader& loader, const std::vector<LinearPart>& parts, int64_t in_features,
                             bool with_bias, InputColumns columns) {
  CHECK(!parts.empty());
  std::vector<std::string> weight_names, bias_names;
  std::vector<std::vector<int64_t>> weight_shapes, bias_shapes;
  std::vector<TensorSlice> weight_slices, bias_slices;
  bool sharded = !columns.all();
  for (const LinearPart& part : parts) {
    weight_names.push_back(part.prefix + ".weight");
    weight_shapes.push_back({part.out_features, in_features});
    weight_slices.push_back({part.row_begin, part.row_count, columns.begin, columns.count});
    bias_names.push_back(part.prefix + ".bias");
    bias_shapes.push_back({part.out_features});
    bias_slices.push_back({part.row_begin, part.row_count, 0, -1});
    sharded = sharded || part.row_begin != 0 || part.row_count >= 0;
  }
  PAGELLM_ASSIGN_OR_RETURN(const WeightFormat format, parts_format(loader, parts));
  if (sharded && (format != WeightFormat::kDense || loader.quantization().online))
    return unimplemented("[model] {}: tensor parallelism over quantized projections is not supported yet",
                         parts[0].prefix);
  Linear linear;
  switch (format) {
    case WeightFormat::kDense: {
      if (loader.quantization().online) {
        PAGELLM_ASSIGN_OR_RETURN(linear, quantize_fp8_at_load(loader, parts, in_features));
        break;
      }
      PAGELLM_ASSIGN_OR_RETURN(linear.weight, loader.load_rows(weight_names, weight_shapes,
                                                               sharded ? weight_slices : std::vector<TensorSlice>{}));
      break;
    }
    case WeightFormat::kFp8Block: {
      PAGELLM_ASSIGN_OR_RETURN(linear, load_fp8(loader, parts, in_features));
      break;
    }
    case WeightFormat::kInt4: {
      PAGELLM_ASSIGN_OR_RETURN(linear, load_int4(loader, parts, in_features));
      break;
    }
    case WeightFormat::kMxfp4: CHECK_MSG(false, "stored_format never answers kMxfp4");
  }
  // A row-parallel shard's output is a partial sum: the bias is added by one rank only.
  if (with_bias && (columns.all() || loader.tp_rank() == 0)) {
    PAGELLM_ASSIGN_OR_RETURN(linear.bias, loader.load_rows(bias_names, bias_shapes,
                                                           sharded ? bias_slices : std::vector<TensorSlice>{}));
  }
  return linear;
}

}  // namespace pagellm::layers
