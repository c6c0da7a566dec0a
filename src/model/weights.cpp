#include "model/weights.h"

#include <algorithm>
#include <cstring>

namespace pagellm {

namespace {

Shape to_shape(const std::vector<int64_t>& dims) {
  Shape shape;
  for (int64_t d : dims) shape[shape.ndim++] = d;
  return shape;
}

// Converts `count` elements at `src` (possibly unaligned in the mapping) into `dst` of dst_dtype.
void convert_span(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count) {
  const size_t nbytes = count * dtype_size_bytes(src_dtype);
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  std::vector<uint8_t> aligned(nbytes);
  std::memcpy(aligned.data(), src, nbytes);
  std::vector<float> wide(count);
  convert_to_f32(aligned.data(), src_dtype, wide.data(), count);
  convert_from_f32(wide.data(), dst, dst_dtype, count);
}

// Converts a whole checkpoint tensor into `dst` of dst_dtype.
void convert_into(const TensorInfo& info, void* dst, DType dst_dtype) {
  convert_span(info.data, info.dtype, dst, dst_dtype, info.nbytes / dtype_size_bytes(info.dtype));
}

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

// A tensor read as a plain float matrix that the checkpoint stores quantized: said by name, since
// only the projections that go through layers::Linear read quantized formats.
Status refuse_quantized(const Checkpoint& checkpoint, const std::string& name) {
  if (!name.ends_with(".weight")) return Status::ok();
  const std::string prefix = name.substr(0, name.size() - 7);
  const TensorInfo* info = checkpoint.find(name);
  const bool fp8 = info != nullptr && info->dtype == DType::kF8E4M3;
  if (!fp8 && (info != nullptr || checkpoint.find(prefix + ".qweight") == nullptr)) return Status::ok();
  return unimplemented("[checkpoint] '{}' is stored quantized ({}); pagellm reads quantized weights in the "
                       "attention, MLP and Gated DeltaNet projections only",
                       prefix, fp8 ? "fp8" : "qweight");
}

}  // namespace

Expected<Tensor> WeightLoader::load(const std::string& name, const std::vector<int64_t>& shape) {
  return load_rows({name}, {shape});
}

Expected<Tensor> WeightLoader::load_rows(const std::vector<std::string>& names,
                                         const std::vector<std::vector<int64_t>>& shapes,
                                         const std::vector<TensorSlice>& slices) {
  CHECK(names.size() == shapes.size() && !names.empty() && (slices.empty() || slices.size() == names.size()));
  std::vector<const TensorInfo*> infos;
  std::vector<TensorSlice> kept;  // each tensor's block, counts resolved
  int64_t total_rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    PAGELLM_RETURN_IF_ERROR(refuse_quantized(checkpoint_, names[i]));
    PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_.get(names[i], shapes[i]));
    if (!is_float(info->dtype))
      return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected a float dtype", names[i],
                              dtype_name(info->dtype));
    infos.push_back(info);
    const int64_t rows = shapes[i].empty() ? 1 : shapes[i][0];
    int64_t cols = 1;  // a row's elements (dims after the first)
    for (size_t d = 1; d < shapes[i].size(); ++d) cols *= shapes[i][d];
    TensorSlice slice = slices.empty() ? TensorSlice{} : slices[i];
    if (slice.row_count < 0) slice.row_count = rows - slice.row_begin;
    if (slice.col_count < 0) slice.col_count = cols - slice.col_begin;
    CHECK_MSG(slice.row_begin >= 0 && slice.row_begin + slice.row_count <= rows && slice.col_begin >= 0 &&
                  slice.col_begin + slice.col_count <= cols && (slices.empty() || shapes[i].size() <= 2),
              "slice of '{}' outside its shape", names[i]);
    kept.push_back(slice);
    total_rows += slice.row_count;
  }
  std::vector<int64_t> out_dims = shapes[0];
  if (!out_dims.empty()) out_dims[0] = total_rows;
  if (!slices.empty() && out_dims.size() == 2) out_dims[1] = kept[0].col_count;
  Tensor host = Tensor::cpu(to_shape(out_dims), weight_dtype_);
  char* cursor = host.ptr<char>();
  const size_t out_element = dtype_size_bytes(weight_dtype_);
  for (size_t i = 0; i < infos.size(); ++i) {
    const TensorInfo& info = *infos[i];
    const TensorSlice& slice = kept[i];
    CHECK_MSG(slice.col_count == kept[0].col_count, "stacked slices of different widths");
    const size_t in_element = dtype_size_bytes(info.dtype);
    if (slice.row_begin == 0 && slice.col_begin == 0 &&
        static_cast<size_t>(slice.row_count * slice.col_count) * in_element == info.nbytes) {  // all of it
      convert_into(info, cursor, weight_dtype_);
      cursor += info.nbytes / dtype_size_bytes(info.dtype) * out_element;
      continue;
    }
    const int64_t cols = static_cast<int64_t>(info.nbytes / in_element) / shapes[i][0];
    for (int64_t r = 0; r < slice.row_count; ++r) {
      const char* src = static_cast<const char*>(info.data) + ((slice.row_begin + r) * cols + slice.col_begin) * in_element;
      convert_span(src, info.dtype, cursor, weight_dtype_, static_cast<size_t>(slice.col_count));
      cursor += slice.col_count * out_element;
    }
  }
  return upload(std::move(host));
}

Tensor WeightLoader::upload(Tensor host) {
  if (backend_.device() == Device::kCpu) return host;
  Tensor device = backend_.alloc(host.shape(), host.dtype());
  backend_.copy(device.view(), host.view());
  return device;
}

Expected<std::vector<float>> WeightLoader::load_host_f32(const std::string& name,
                                                         const std::vector<int64_t>& shape) {
  PAGELLM_RETURN_IF_ERROR(refuse_quantized(checkpoint_, name));
  PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_.get(name, shape));
  if (!is_float(info->dtype))
    return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected a float dtype", name,
                            dtype_name(info->dtype));
  std::vector<float> out(info->nbytes / dtype_size_bytes(info->dtype));
  convert_into(*info, out.data(), DType::kF32);
  return out;
}

}  // namespace pagellm
