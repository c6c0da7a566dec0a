// Timing of the CPU GEMM against OpenBLAS's cblas_sgemm at the model's shapes (disabled: run with
//   build/tests/test_kernels --gtest_also_run_disabled_tests --gtest_filter='*CpuGemmBench*'
// and PAGELLM_NUM_THREADS / OPENBLAS_NUM_THREADS set alike). Prints wall and process CPU time per call.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/gemm.h"
#include "core/thread_pool.h"

// OpenBLAS (linked through the backend library); declared here so the test needs no BLAS headers.
extern "C" {
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc);
int openblas_get_num_threads(void);
}

namespace pagellm {
namespace {

double seconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall_ms, cpu_ms;
};

// Median-free but robust enough: best of 3 rounds of calls totalling >= min_s of wall each.
template <typename Fn>
Timing time_calls(Fn fn, double min_s) {
  fn();  // warm up
  Timing best{1e30, 1e30};
  for (int round = 0; round < 3; ++round) {
    int calls = 0;
    const double w0 = seconds(CLOCK_MONOTONIC), c0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
    double w1 = w0;
    do {
      fn();
      ++calls;
      w1 = seconds(CLOCK_MONOTONIC);
    } while (w1 - w0 < min_s);
    const double c1 = seconds(CLOCK_PROCESS_CPUTIME_ID);
    best.wall_ms = std::min(best.wall_ms, 1e3 * (w1 - w0) / calls);
    best.cpu_ms = std::min(best.cpu_ms, 1e3 * (c1 - c0) / calls);
  }
  return best;
}

// `copies` > 1: the calls cycle through that many copies of w (together larger than the L3), so w
// comes from memory as it does in a model whose weights do not fit in cache.
void bench(int64_t m, int64_t n, int64_t k, double min_s, int copies = 1) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> x(static_cast<size_t>(m * k)), out(static_cast<size_t>(m * n));
  std::vector<std::vector<float>> ws(static_cast<size_t>(copies), std::vector<float>(static_cast<size_t>(n * k)));
  for (auto& f : x) f = dist(rng);
  for (auto& w : ws)
    for (auto& f : w) f = dist(rng);
  size_t next = 0;
  const Timing ours = time_calls(
      [&] {
        const float* w = ws[next++ % ws.size()].data();
        cpu::gemm_f32(m, n, k, x.data(), k, w, k, out.data(), n);
      },
      min_s);
  const Timing blas = time_calls(
      [&] {
        const float* w = ws[next++ % ws.size()].data();
        cblas_sgemm(101 /*RowMajor*/, 111 /*NoTrans*/, 112 /*Trans*/, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.0f, x.data(), static_cast<int>(k), w, static_cast<int>(k), 0.0f,
                    out.data(), static_cast<int>(n));
      },
      min_s);
  const double gflop = 2e-9 * static_cast<double>(m * n * k);
  std::printf("M=%4lld N=%6lld K=%5lld %s| gemm wall %8.3f ms cpu %8.3f ms (%6.1f GFLOP/s) | openblas wall %8.3f ms cpu "
              "%8.3f ms (%6.1f GFLOP/s) | wall ratio %.2f cpu ratio %.2f\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), copies > 1 ? "cold w " : "       ", ours.wall_ms,
              ours.cpu_ms, gflop / ours.wall_ms * 1e3, blas.wall_ms, blas.cpu_ms, gflop / blas.wall_ms * 1e3,
              ours.wall_ms / blas.wall_ms, ours.cpu_ms / blas.cpu_ms);
  std::fflush(stdout);
}

void print_setup() {
  std::printf("threads: pagellm %d, openblas %d, kernel %s\n", ThreadPool::global().num_threads(),
              openblas_get_num_threads(), cpu::gemm_isa() == cpu::GemmIsa::kAvx2 ? "avx2" : "portable");
}

TEST(CpuGemmBench, DISABLED_Decode) {
  print_setup();
  for (const int64_t m : {1, 2, 4, 8, 16}) bench(m, 3072, 1024, 0.3);
  for (const int64_t m : {1, 2, 4, 8, 16}) bench(m, 3072, 1024, 0.3, 8);
}

TEST(CpuGemmBench, DISABLED_LmHead) {
  print_setup();
  for (const int64_t m : {1, 4, 16}) bench(m, 151936, 1024, 1.0);
}

TEST(CpuGemmBench, DISABLED_Prefill) {
  print_setup();
  for (const int64_t m : {64, 512}) bench(m, 3072, 1024, 1.0);
}

}  // namespace
}  // namespace pagellm
