// The gated-MLP activations (backend.h Activation) on the device, shared by act_mul (elementwise.cu)
// and the grouped expert GEMM's epilogue (moe.cu), so both round at the same points.
#pragma once

#include "backend/cuda/device_common.cuh"

namespace pagellm::cuda {

// The gated-MLP activations (backend.h Activation), in f32 in torch's order of operations.
__device__ __forceinline__ float silu_f32(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
__device__ __forceinline__ float gelu_tanh_f32(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float inner = __fmul_rn(kBeta, __fadd_rn(x, __fmul_rn(kKappa, __fmul_rn(__fmul_rn(x, x), x))));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

template <typename T, Activation kAct>
__device__ __forceinline__ T act_times(float gate, float up) {
  if constexpr (kAct == Activation::kClampedSwiglu) {  // rounded as transformers' GptOssExperts
    const float g = fminf(gate, kClampedSwigluLimit);
    const float u = fminf(fmaxf(up, -kClampedSwigluLimit), kClampedSwigluLimit);
    const float scaled = round_to<T>(__fmul_rn(g, kClampedSwigluAlpha));
    const float sigmoid = round_to<T>(__fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-scaled))));
    const float glu = round_to<T>(__fmul_rn(g, sigmoid));
    return from_f32<T>(__fmul_rn(round_to<T>(__fadd_rn(u, 1.0f)), glu));
  } else {
    // transformers rounds act(gate) to the activation dtype before multiplying by up.
    const float act = kAct == Activation::kGeluTanh ? gelu_tanh_f32(gate) : silu_f32(gate);
    return from_f32<T>(__fmul_rn(round_to<T>(act), up));
  }
}

}  // namespace pagellm::cuda
