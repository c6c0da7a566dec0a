#include "model/weights.h"

#include <cstring>

namespace pagellm {

namespace {

Shape to_shape(const std::vector<int64_t>& dims) {
  Shape shape;
  for (int64_t d : dims) shape[shape.ndim++] = d;
  return shape;
}

// Converts a checkpoint tensor (possibly unaligned in the mapping) into `dst` of dst_dtype.
void convert_into(const TensorInfo& info, void* dst, DType dst_dtype) {
  const size_t count = info.nbytes / dtype_size_bytes(info.dtype);
  if (info.dtype == dst_dtype) {
    std::memcpy(dst, info.data, info.nbytes);
    return;
  }
  std::vector<uint8_t> aligned(info.nbytes);
  std::memcpy(aligned.data(), info.data, info.nbytes);
  std::vector<float> wide(count);
  convert_to_f32(aligned.data(), info.dtype, wide.data(), count);
  convert_from_f32(wide.data(), dst, dst_dtype, count);
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
                                         const std::vector<std::vector<int64_t>>& shapes) {
  CHECK(names.size() == shapes.size() && !names.empty());
  std::vector<const TensorInfo*> infos;
  int64_t total_rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    PAGELLM_RETURN_IF_ERROR(refuse_quantized(checkpoint_, names[i]));
    PAGELLM_ASSIGN_OR_RETURN(const TensorInfo* info, checkpoint_.get(names[i], shapes[i]));
    if (!is_float(info->dtype))
      return invalid_argument("[checkpoint] tensor '{}' has dtype {}, expected a float dtype", names[i],
                              dtype_name(info->dtype));
    infos.push_back(info);
    total_rows += shapes[i].empty() ? 1 : shapes[i][0];
  }
  std::vector<int64_t> out_dims = shapes[0];
  if (!out_dims.empty()) out_dims[0] = total_rows;
  Tensor host = Tensor::cpu(to_shape(out_dims), weight_dtype_);
  char* cursor = host.ptr<char>();
  for (const TensorInfo* info : infos) {
    convert_into(*info, cursor, weight_dtype_);
    cursor += info->nbytes / dtype_size_bytes(info->dtype) * dtype_size_bytes(weight_dtype_);
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
