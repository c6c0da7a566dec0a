#include "backend/cpu/fp8_group_quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace pagellm::cpu {

void quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) {
  CHECK_MSG(x.ndim() == 2 && (x.dtype == DType::kF32 || x.dtype == DType::kBF16 || x.dtype == DType::kF16) &&
                (x.strides[1] == 1 || x.size(1) == 1),
            "[cpu] quantize_fp8_groups: x must be 2-D f32/bf16/f16 with unit column stride, got {} {}",
            x.shape.to_string(), dtype_name(x.dtype));
  const int64_t m = x.size(0), k = x.size(1), groups = k / kFp8GroupSize;
  CHECK_MSG(k % kFp8GroupSize == 0, "[cpu] quantize_fp8_groups: K must be a multiple of {}, got {}", kFp8GroupSize, k);
  CHECK_MSG(x_fp8.ndim() == 2 && x_fp8.dtype == DType::kF8E4M3 && x_fp8.is_contiguous() && x_fp8.size(0) == m &&
                x_fp8.size(1) == k,
            "[cpu] quantize_fp8_groups: x_fp8 must be a contiguous [{}, {}] f8_e4m3 tensor, got {} {}", m, k,
            x_fp8.shape.to_string(), dtype_name(x_fp8.dtype));
  CHECK_MSG(scales.ndim() == 2 && scales.dtype == DType::kF32 && scales.is_contiguous() && scales.size(0) == groups &&
                scales.size(1) == m,
            "[cpu] quantize_fp8_groups: scales must be a contiguous [{}, {}] f32 tensor, got {} {}", groups, m,
            scales.shape.to_string(), dtype_name(scales.dtype));
  const int64_t ld_x = m > 1 ? x.strides[0] : k;
  const size_t elem_bytes = dtype_size_bytes(x.dtype);
  uint8_t* q = static_cast<uint8_t*>(x_fp8.data);
  float* s = scales.ptr<float>();
  std::vector<float> group(kFp8GroupSize);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const char* src = static_cast<const char*>(x.data) + (r * ld_x + g * kFp8GroupSize) * static_cast<int64_t>(elem_bytes);
      convert_to_f32(src, x.dtype, group.data(), group.size());
      float amax = 0.0f;
      for (float v : group) amax = std::max(amax, std::fabs(v));
      float scale = amax / kE4m3Max;
      if (scale == 0.0f) scale = 1.0f;  // an all-zero group (or one too small for a normal scale) stays 0
      s[g * m + r] = scale;
      uint8_t* dst = q + r * k + g * kFp8GroupSize;
      for (int64_t c = 0; c < kFp8GroupSize; ++c) dst[c] = f32_to_e4m3_bits(group[static_cast<size_t>(c)] / scale);
    }
  }
}

}  // namespace pagellm::cpu
