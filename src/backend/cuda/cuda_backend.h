// The CUDA backend: the same ops as the CPU backend (backend/backend.h), on one NVIDIA GPU.
// Weights stay in the checkpoint's dtype (bf16 stays bf16; f32 checkpoints run f32, without TF32).
// This header needs no CUDA headers; registry.cpp includes it when built with PAGELLM_CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/status.h"

struct CUstream_st;  // the CUDA runtime's stream type (cudaStream_t is a CUstream_st*)

namespace pagellm {

// The backend on CUDA device `device` (0: the first after CUDA_VISIBLE_DEVICES), on a stream of its
// own. Fails with "[cuda] no CUDA device: <reason>" when the machine has none (or no driver).
Expected<std::unique_ptr<Backend>> make_cuda_backend(int device = 0);
// GPUs this process sees (0 without a driver).
int cuda_device_count();

// Where a CUDA backend queues its work (for the collectives, cuda_communicators.h): its device and
// its stream (a cudaStream_t). CHECK-fails for a backend that is not CUDA.
struct CudaPlacement {
  int device = 0;
  ::CUstream_st* stream = nullptr;
};
CudaPlacement cuda_placement(const Backend& backend);

}  // namespace pagellm
