// The launcher of collectives.cu (the same-device all-reduce of cuda_communicators.cpp). Free of
// fmt/Tensor, as kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::cuda {

// The buffers of the ranks of one group on one GPU, in rank order.
struct RankBuffers {
  static constexpr int kMaxRanks = 16;
  const void* data[kMaxRanks] = {};
  int num_ranks = 0;
};
// out[i] = cast(sum over r in order of parts.data[r][i]) (f32 sums, one rounding); count elements.
cudaError_t launch_sum_ranks(DType dtype, RankBuffers parts, void* out, int64_t count, cudaStream_t stream);

}  // namespace pagellm::cuda
