// The sum of the ranks' partial outputs for ranks that share one GPU (cuda_communicators.cpp): every
// rank's buffer is device memory of the same context, read in rank order.
#include <algorithm>

#include "backend/cuda/collectives.h"
#include "backend/cuda/device_common.cuh"

namespace pagellm::cuda {

namespace {

template <typename T>
__global__ void sum_ranks_kernel(RankBuffers parts, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (int r = 0; r < parts.num_ranks; ++r) sum += to_f32(static_cast<const T*>(parts.data[r])[i]);
    out[i] = from_f32<T>(sum);
  }
}

}  // namespace

cudaError_t launch_sum_ranks(DType dtype, RankBuffers parts, void* out, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((count + kThreads - 1) / kThreads, 4096));
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    sum_ranks_kernel<T><<<blocks, kThreads, 0, stream>>>(parts, static_cast<T*>(out), count);
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
