// Backend's default op bodies that are not compositions of other ops: the CPU twins.
#include "backend/backend.h"

#include "core/check.h"

namespace pagellm {

void Backend::copy_ids(TensorView dst, const TensorView& src, const TensorView& pairs) {
  CHECK_MSG(dst.dtype == DType::kI32 && src.dtype == DType::kI32 && pairs.dtype == DType::kI32 &&
                dst.is_contiguous() && src.is_contiguous() && pairs.is_contiguous() && pairs.ndim() == 2 &&
                pairs.size(1) == 2,
            "[{}] copy_ids: dst [D], src [S] and pairs [N, 2] must be contiguous i32, got {} {}, {} {}, {} {}", name(),
            dtype_name(dst.dtype), dst.shape.to_string(), dtype_name(src.dtype), src.shape.to_string(),
            dtype_name(pairs.dtype), pairs.shape.to_string());
  int32_t* out = dst.ptr<int32_t>();
  const int32_t* in = src.ptr<int32_t>();
  const int32_t* pair = pairs.ptr<int32_t>();
  for (int64_t i = 0; i < pairs.size(0); ++i) {
    const int32_t to = pair[2 * i], from = pair[2 * i + 1];
    CHECK_MSG(to >= 0 && to < dst.numel() && from >= 0 && from < src.numel(),
              "[{}] copy_ids: pair {} is ({}, {}) for dst [{}] and src [{}]", name(), i, to, from, dst.numel(),
              src.numel());
    out[to] = in[from];
  }
}

}  // namespace pagellm
