// The CPU matmul: out[M, N] = x[M, K] . w[N, K]^T in f32, batch invariant.
//
// Every output element is the same function of its row of x and its row of w, whatever M, the
// tiling or the thread count (DESIGN.md "Numerics and exactness"): eight f32 lanes, lane l summing
// x[k] * w[k] for k = l, l + 8, l + 16, ... in increasing k with one fused multiply-add per term
// (the last chunk of 8 padded with zeros when K is not a multiple of 8), then the fixed tree
// ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)). The AVX2 kernel and the portable one compute
// exactly this, so they give the same bits; a process still uses one of them for every call.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace pagellm {
class ThreadPool;
}

namespace pagellm::cpu {

enum class GemmIsa { kPortable, kAvx2 };

// The kernel this process uses: AVX2 + FMA when the CPU has both, else the portable one.
GemmIsa gemm_isa();

// out[i * ldo + j] = sum_k x[i * ldx + k] * w[j * ldw + k] for i < m, j < n (f32, unit column
// strides). Threads over blocks of w's rows on `pool` (nullptr: ThreadPool::global()).
void gemm_f32(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
              float* out, int64_t ldo, ThreadPool* pool = nullptr);
// The same with a chosen kernel (tests compare the two; kAvx2 needs a CPU that has it).
void gemm_f32_isa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, float* out, int64_t ldo, ThreadPool* pool = nullptr);

// The same with bf16 weights (raw bf16 bits), widened exactly as they are read: bitwise the result of
// gemm_f32_isa on their f32 copy.
void gemm_bf16w_isa(GemmIsa isa, int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const uint16_t* w,
                    int64_t ldw, float* out, int64_t ldo, ThreadPool* pool = nullptr);

// The Backend::matmul contract: x [M, K] and out [M, N] of any float dtype with a row stride
// (unit column stride), w [N, K] contiguous f32 or bf16; computes in f32 and rounds once to out's dtype.
void matmul(TensorView out, const TensorView& x, const TensorView& w, ThreadPool* pool = nullptr);

// The f32 rows the GEMMs read from x [M, K] (unit column stride): x itself when f32, else x widened
// once into `storage` (contiguous). `ld` is the row stride of what `data` points at.
struct F32Rows {
  const float* data = nullptr;
  int64_t ld = 0;
};
F32Rows f32_rows(const TensorView& x, std::vector<float>& storage);

}  // namespace pagellm::cpu
