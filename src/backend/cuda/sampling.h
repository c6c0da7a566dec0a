// Launcher of the device sampler (sampling.cu), callable from host C++; a plain header like kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/sampling_math.h"

namespace pagellm::cuda {

// ids[r] = sampling::draw_token(logits row r, params[r]) for rows with params[r].temperature > 0;
// other rows keep their id. One block per row, no scratch, no host-side planning (graph-safe).
// logits: R rows of V; params: [R] on the device; ids: [R] i32 on the device.
cudaError_t launch_sample(DType dtype, int32_t* ids, Rows logits, const sampling::RowParams* params,
                          cudaStream_t stream);

}  // namespace pagellm::cuda
