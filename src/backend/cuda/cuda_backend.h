// The CUDA backend: the same ops as the CPU backend (backend/backend.h), on one NVIDIA GPU.
// Weights stay in the checkpoint's dtype (bf16 stays bf16; f32 checkpoints run f32, without TF32).
// This header needs no CUDA headers; registry.cpp includes it when built with PAGELLM_CUDA.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/status.h"

namespace pagellm {

// The backend on CUDA device 0 (after CUDA_VISIBLE_DEVICES). Fails with
// "[cuda] no CUDA device: <reason>" when the machine has none (or no driver).
Expected<std::unique_ptr<Backend>> make_cuda_backend();

}  // namespace pagellm
