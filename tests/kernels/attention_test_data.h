// Test inputs for the paged attention ops: random varlen batches, their paged layouts (random block
// tables, garbage in unused blocks), the implementations under test and the comparison rules.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace pagellm::attention_test {

// splitmix64: fast, seedable, the same numbers on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  float uniform(float lo, float hi);
  int64_t below(int64_t n);  // uniform in [0, n)

 private:
  uint64_t state_;
};

struct SeqShape {
  int64_t q_len = 0;        // new tokens this step
  int64_t context_len = 0;  // tokens in the cache after this step (>= q_len)
};

struct AttentionCase {
  int64_t num_heads = 4, num_kv_heads = 4, head_dim = 64;
  std::vector<SeqShape> seqs;
  int32_t window = -1;  // -1 = off
  float softcap = 0;    // 0 = off
  bool causal = true;
  DType dtype = DType::kF32;  // q, caches and out
  uint64_t seed = 1;
  // An FP8 KV cache: the caches hold e4m3(x / scale) (backend.h KvScales) and the dense keys/values
  // are what attention must read back, float(stored) * scale; q and out keep `dtype`.
  bool fp8_cache = false;
  KvScales kv_scales{};
  // Attention sinks (AttentionParams::sinks): one logit per query head, drawn from [0, 8], so the
  // sink outweighs every key on some rows and is negligible on others.
  bool sinks = false;
};

// The inputs of a case that do not depend on paging. Values are drawn in f32 and rounded to the
// case dtype, so every corner of the triangle sees exactly the same numbers.
struct DenseInputs {
  Tensor q;                                      // [T, num_heads, head_dim], case dtype
  Tensor cu_seqlens_q;                           // [num_seqs + 1], i32
  Tensor seq_lens_k;                             // [num_seqs], i32
  std::vector<std::vector<float>> keys, values;  // per sequence: [context_len, num_kv_heads, head_dim]
  Tensor sinks;                                  // [num_heads] f32 when the case has sinks
  int64_t num_tokens = 0;
};

DenseInputs make_dense_inputs(const AttentionCase& c, Rng& rng);

// One paged layout of the dense inputs: each sequence gets distinct blocks drawn from a random
// permutation of all block ids; blocks nobody owns hold random (finite) garbage; block-table
// entries past a sequence's last block are -1, so reading one is caught.
struct PagedInputs {
  Tensor k_cache, v_cache;  // [num_blocks, block_size, num_kv_heads, head_dim], case dtype (or f8_e4m3)
  Tensor block_tables;      // [num_seqs, max_blocks_per_seq], i32
};

PagedInputs page_inputs(const AttentionCase& c, const DenseInputs& in, int64_t block_size, Rng& rng);

AttentionParams make_params(const AttentionCase& c, const DenseInputs& in, const PagedInputs& paged);

// Writes `value` rounded to `dtype` (f32, bf16, f16 or f8_e4m3, unscaled) at element `offset` of `base`.
void store_float(void* base, DType dtype, int64_t offset, float value);
float load_float(const void* base, DType dtype, int64_t offset);
// Fills a tensor with NaN so rows an op forgets to write stand out.
void fill_nan(const Tensor& t);

// The elements i < n whose error(i) is not within allowed(i) (a NaN error never is): how many, and
// the worst by error / allowed (-1 when none), for the comparisons' one-line messages.
struct Violations {
  int64_t count = 0, worst = -1;
};
template <typename Error, typename Allowed>
Violations find_violations(int64_t n, Error error, Allowed allowed) {
  Violations v;
  double worst_excess = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = error(i), a = allowed(i);
    if (e <= a) continue;
    ++v.count;
    const double excess = std::isnan(e) ? 1e300 : e / a;
    if (v.worst < 0 || excess > worst_excess) {
      v.worst = i;
      worst_excess = excess;
    }
  }
  return v;
}

// The implementations besides the reference (the triangle's other corners). Each takes host views
// and writes host `out`. A device backend joins the list with an entry that copies the inputs to its
// device (Backend::alloc/copy), runs its attention op, and copies out back; every test below then
// compares it against the reference and against each other entry.
using AttentionFn = std::function<void(TensorView out, const TensorView& q, const TensorView& k_cache,
                                       const TensorView& v_cache, const AttentionParams& params)>;
struct AttentionImpl {
  std::string name;
  AttentionFn run;
};
std::vector<AttentionImpl> attention_impls();

// |actual - expected| <= rel * |expected| + abs, elementwise.
struct Tolerance {
  double rel = 0, abs = 0;
};
// Against the f64 reference, for an output written in `out_dtype`:
//   f32:  compute error only (f32 scores, online softmax): rel 2e-5, abs 2e-6.
//   bf16: one bf16 ulp (2^-7 relative: the output is rounded once, at most half an ulp, plus f32
//         compute error that can tip a rounding to the neighbour), abs 1e-6.
Tolerance tolerance_vs_reference(DType out_dtype);
// Between two implementations: each may be off from the truth by one tolerance.
Tolerance tolerance_between(DType out_dtype);

// Compares an output tensor against expected values; returns "" or a description of the worst
// element (and the count of failures) for the assertion message.
std::string compare(const std::vector<double>& expected, const Tensor& actual, Tolerance tol);
std::vector<double> to_doubles(const Tensor& t);

}  // namespace pagellm::attention_test
