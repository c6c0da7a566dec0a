// Dynamic FP8 quantization of activations per token and 128-column group (Backend::quantize_fp8_groups):
// the readable twin of the CUDA kernel that feeds the W8A8 product (cuda/fp8_group_quant.cu), and
// the reference its test compares with bitwise.
//
//   x [M, K], K = 128 * G           x_fp8 [M, K] e4m3       scales [G, M] f32 (group-major)
//   row m: | g = 0 | g = 1 | ...    same positions           scales[g * M + m] = max|x[m, group g]| / 448
//
// Every step is one IEEE f32 operation (max of |x|, one division for the scale, one division per
// element, one round-to-nearest-even narrowing that saturates to +-448), so the GPU gets the same bits.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace pagellm::cpu {

inline constexpr int64_t kFp8GroupSize = 128;  // columns per activation scale
inline constexpr float kE4m3Max = 448.0f;      // largest finite e4m3 value

// The contract of Backend::quantize_fp8_groups (backend.h); x on the host with unit column stride.
void quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x);

}  // namespace pagellm::cpu
