// Device sampler: one block per logits row finds the tokens top-k / top-p / min-p keep without
// sorting the vocabulary, then draws with a prefix scan in id order. sampling_math.h defines the
// result (the CPU twin and the host sampler run the same rules); this file only finds it fast.
//
//   pass over the row              times        finds
//   max                            1            the max logit (so w_max = 1)
//   top-k select (by count)        4 (+1 ties)  the k-th token in rank order
//   top-k mass                     1            sum of W over the top-k set (the top-p base)
//   top-p select (by mass)         4 (+1 ties)  the token where the rank-prefix sum of W reaches the target
//   kept total                     1            sum of W over the kept tokens, the last kept id
//   draw                           <= 1         the first kept id whose running sum of W exceeds the target
//
// Radix select: order_key(x) is 32 bits whose unsigned order is the float order. Four passes of 8
// bits from the top: each histograms (count, sum of W) of the next digit over the tokens still
// matching the chosen prefix, and thread 0 walks the 256 bins from the top until the running count
// (top-k) or sum of W (top-p) reaches its target. The tokens at the selected key are tied in rank;
// when only some of them stay, one scan in id order finds the last one kept (ties: lower id first).
//
// Every sum is an integer (the fixed-point W of sampling_math.h), so histograms built with atomics
// give the same result in every run, batch and launch. Without top-p the two select phases are
// skipped; a row costs ~4-12 reads of its logits from one SM (tens of microseconds at 151,936
// tokens), and rows run on separate SMs. Splitting a row over several blocks is the next step if a
// profile shows few-row steps waiting on this kernel.
//
// The same file holds the two ops that let rows with penalties or logprobs stay on the device:
// apply_penalties (f32 penalised copies of rows, counted over their history with integer atomics)
// and logprobs (a block per row: f64 log-sum-exp, then the radix select above over the keys of
// the f32 logprobs for the top entries).
#include <cstdint>

#include "backend/cuda/device_common.cuh"
#include "backend/cuda/sampling.h"

namespace pagellm::cuda {

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;  // one 8-bit digit of the key per pass
constexpr int64_t kAllIds = INT64_MAX;

// A prefix of the rank order: the tokens with key > `key`, or key == `key` and id <= last_id.
struct Cut {
  uint32_t key = 0;
  int64_t last_id = kAllIds;  // {0, kAllIds}: every token
  __device__ bool contains(uint32_t k, int64_t id) const { return k > key || (k == key && id <= last_id); }
};

struct Shared {
  uint32_t bin_count[kBins];
  u64 bin_mass[kBins];        // sum of W per bin
  u64 lane_mass[kWarps][32];  // one W per thread, summed by the warp's leader of each digit
  u64 warp_u64[kWarps];
  double warp_f64[kWarps];
  float warp_f32[kWarps];
  long long warp_i64[kWarps];
  int chosen_bin;
  u64 before_count, before_mass;
  long long found_id;
  // logprobs: the top tokens, collected in any order and then sorted by one thread
  int num_top_found;
  int32_t top_id[sampling::kMaxTopLogprobs];
  uint32_t top_key[sampling::kMaxTopLogprobs];
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31); }
__device__ __forceinline__ int warp_id() { return static_cast<int>(threadIdx.x >> 5); }

__device__ float block_max(float v, Shared& s) {
  v = warp_max(v);
  if (lane_id() == 0) s.warp_f32[warp_id()] = v;
  __syncthreads();
  float result = s.warp_f32[0];
  for (int w = 1; w < kWarps; ++w) result = fmaxf(result, s.warp_f32[w]);
  __syncthreads();
  return result;
}

// Block-wide sum through one slot per warp (`warp_slots`, kWarps of them). A fixed-order tree: for
// doubles too, the same sum in every run.
template <typename V>
__device__ V block_sum(V v, V* warp_slots) {
  for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(kFullMask, v, k);
  if (lane_id() == 0) warp_slots[warp_id()] = v;
  __syncthreads();
  V result = 0;
  for (int w = 0; w < kWarps; ++w) result += warp_slots[w];
  __syncthreads();
  return result;
}

__device__ long long block_max_i64(long long v, Shared& s) {
  for (int k = 16; k > 0; k >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, k));
  if (lane_id() == 0) s.warp_i64[warp_id()] = v;
  __syncthreads();
  long long result = s.warp_i64[0];
  for (int w = 1; w < kWarps; ++w) result = max(result, s.warp_i64[w]);
  __syncthreads();
  return result;
}

// Inclusive prefix sum of v over the block's threads in order; *total = the block's sum.
__device__ u64 block_inclusive_scan(u64 v, Shared& s, u64* total) {
  for (int d = 1; d < 32; d <<= 1) {
    const u64 n = __shfl_up_sync(kFullMask, v, d);
    if (lane_id() >= d) v += n;
  }
  if (lane_id() == 31) s.warp_u64[warp_id()] = v;
  __syncthreads();
  if (warp_id() == 0) {
    u64 t = s.warp_u64[lane_id()];  // kWarps == 32: one warp total per lane
    for (int d = 1; d < 32; d <<= 1) {
      const u64 n = __shfl_up_sync(kFullMask, t, d);
      if (lane_id() >= d) t += n;
    }
    s.warp_u64[lane_id()] = t;
  }
  __syncthreads();
  if (warp_id() > 0) v += s.warp_u64[warp_id() - 1];
  *total = s.warp_u64[kWarps - 1];
  __syncthreads();
  return v;
}

// The first id (id order) at which the running sum of value(id) exceeds target; -1 when none.
// Tiles of kThreads ids, one block scan each, stopping at the tile that crosses.
template <typename ValueFn>
__device__ int64_t first_exceeding(int64_t vocab, u64 target, ValueFn value, Shared& s) {
  if (threadIdx.x == 0) s.found_id = -1;
  __syncthreads();
  u64 carry = 0;
  for (int64_t base = 0; base < vocab; base += kThreads) {
    const int64_t id = base + threadIdx.x;
    const u64 v = id < vocab ? value(id) : 0;
    u64 tile_total;
    const u64 inclusive = carry + block_inclusive_scan(v, s, &tile_total);
    if (v > 0 && inclusive > target && inclusive - v <= target) s.found_id = id;  // one thread at most
    __syncthreads();
    const long long found = s.found_id;
    __syncthreads();  // everyone has read it before a later call resets it
    if (found >= 0) return found;
    carry += tile_total;
  }
  return -1;
}

// Adds one token per thread (digit < 0: none) to the shared histogram. Logits cluster in a few
// exponents, so the lanes of a warp that share a digit add once through their lowest lane.
template <bool kByMass>
__device__ void add_to_histogram(int digit, u64 mass, Shared& s) {
  const unsigned peers = __match_any_sync(kFullMask, digit);
  if (kByMass) {
    s.lane_mass[warp_id()][lane_id()] = mass;
    __syncwarp();
  }
  if (digit >= 0 && lane_id() == __ffs(peers) - 1) {
    atomicAdd(&s.bin_count[digit], static_cast<uint32_t>(__popc(peers)));
    if (kByMass) {
      u64 sum = 0;
      for (unsigned m = peers; m != 0; m &= m - 1) sum += s.lane_mass[warp_id()][__ffs(m) - 1];
      atomicAdd(&s.bin_mass[digit], sum);
    }
  }
  if (kByMass) __syncwarp();
}

struct Selected {
  uint32_t key;
  u64 before;     // count (top-k) or sum of W (top-p) of the tokens `within` ranked above key
  u64 count_at;   // tokens `within` at key
  u64 mass_at;    // their sum of W
};

// The key at which the running count (kByMass: sum of W) of tokens `within`, in rank order,
// reaches target (1 <= target <= the total). key_of(id): the token's order_key; mass_of(id): its W
// (read only by kByMass).
template <bool kByMass, typename KeyFn, typename MassFn>
__device__ Selected radix_select(int64_t vocab, Cut within, u64 target, Shared& s, KeyFn key_of, MassFn mass_of) {
  uint32_t prefix = 0, mask = 0;
  u64 before_count = 0, before_mass = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) {
      s.bin_count[b] = 0;
      s.bin_mass[b] = 0;
    }
    __syncthreads();
    for (int64_t base = 0; base < vocab; base += kThreads) {
      const int64_t id = base + threadIdx.x;
      int digit = -1;
      u64 mass = 0;
      if (id < vocab) {
        const uint32_t key = key_of(id);
        if ((key & mask) == prefix && within.contains(key, id)) {
          digit = static_cast<int>((key >> shift) & 0xffu);
          if (kByMass) mass = mass_of(id);
        }
      }
      add_to_histogram<kByMass>(digit, mass, s);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int b = kBins - 1;
      for (; b > 0; --b) {
        const u64 in_bin = kByMass ? s.bin_mass[b] : s.bin_count[b];
        if ((kByMass ? before_mass : before_count) + in_bin >= target) break;
        before_count += s.bin_count[b];
        before_mass += s.bin_mass[b];
      }
      s.chosen_bin = b;
      s.before_count = before_count;
      s.before_mass = before_mass;
    }
    __syncthreads();
    const int b = s.chosen_bin;
    before_count = s.before_count;
    before_mass = s.before_mass;
    prefix |= static_cast<uint32_t>(b) << shift;
    mask |= 0xffu << shift;
    if (shift == 0) {
      const Selected selected{prefix, kByMass ? before_mass : before_count, s.bin_count[b], s.bin_mass[b]};
      __syncthreads();
      return selected;
    }
    __syncthreads();
  }
  return {};  // not reached
}

// The id of the n-th (1-based) token `within`, in id order, whose key is `key`.
template <typename KeyFn>
__device__ int64_t nth_tie(int64_t vocab, uint32_t key, Cut within, u64 n, Shared& s, KeyFn key_of) {
  return first_exceeding(vocab, n - 1, [&](int64_t id) -> u64 {
    const uint32_t k = key_of(id);
    return k == key && within.contains(k, id) ? 1 : 0;
  }, s);
}

// The k tokens first in rank order by key_of (0 < k < vocab).
template <typename KeyFn>
__device__ Cut top_k_cut(int64_t vocab, int32_t k, Shared& s, KeyFn key_of) {
  const Cut everything;
  const Selected at =
      radix_select<false>(vocab, everything, static_cast<u64>(k), s, key_of, [](int64_t) -> u64 { return 0; });
  const u64 ties_kept = static_cast<u64>(k) - at.before;  // 1 ..= count_at
  if (ties_kept >= at.count_at) return {at.key, kAllIds};
  return {at.key, nth_tie(vocab, at.key, everything, ties_kept, s, key_of)};
}

// The shortest rank prefix of `within` whose sum of W reaches top_p_target.
template <typename T>
__device__ Cut top_p_cut(const T* x, int64_t vocab, float max_logit, const sampling::RowParams& p, Cut within,
                         Shared& s) {
  u64 local = 0;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    const float value = to_f32(x[id]);
    if (within.contains(sampling::order_key(value), id))
      local += sampling::fixed_weight(sampling::weight(value, max_logit, p.temperature));
  }
  const u64 target = sampling::top_p_target(block_sum(local, s.warp_u64), p.top_p);
  auto key_of = [&](int64_t id) { return sampling::order_key(to_f32(x[id])); };
  auto mass_of = [&](int64_t id) {
    return sampling::fixed_weight(sampling::weight(to_f32(x[id]), max_logit, p.temperature));
  };
  const Selected at = radix_select<true>(vocab, within, target, s, key_of, mass_of);
  const int64_t ties_limit = at.key == within.key ? within.last_id : kAllIds;
  const u64 tie_mass = at.count_at > 0 ? at.mass_at / at.count_at : 0;  // every tie has the same W
  if (tie_mass == 0 || target <= at.before) return {at.key, ties_limit};
  const u64 ties_kept = (target - at.before + tie_mass - 1) / tie_mass;
  if (ties_kept >= at.count_at) return {at.key, ties_limit};
  return {at.key, nth_tie(vocab, at.key, within, ties_kept, s, key_of)};
}

template <typename T>
__global__ void __launch_bounds__(kThreads) sample_kernel(int32_t* ids, Rows logits, const sampling::RowParams* params) {
  const sampling::RowParams p = params[blockIdx.x];
  if (!(p.temperature > 0.0f)) return;  // argmax rows and rows the host samples keep their id
  __shared__ Shared s;
  const T* x = row_ptr<T>(logits, blockIdx.x);
  const int64_t vocab = logits.row_size;

  float local_max = -INFINITY;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) local_max = fmaxf(local_max, to_f32(x[id]));
  const float max_logit = block_max(local_max, s);

  Cut cut;  // every token
  if (p.top_k > 0 && p.top_k < vocab)
    cut = top_k_cut(vocab, p.top_k, s, [&](int64_t id) { return sampling::order_key(to_f32(x[id])); });
  if (p.top_p < 1.0f) cut = top_p_cut(x, vocab, max_logit, p, cut, s);

  // min-p is a per-token test (w >= min_p); with the cut it decides the kept set.
  auto kept_mass = [&](int64_t id, bool* kept) -> u64 {
    const float value = to_f32(x[id]);
    *kept = false;
    if (!cut.contains(sampling::order_key(value), id)) return 0;
    const float w = sampling::weight(value, max_logit, p.temperature);
    if (!sampling::passes_min_p(w, p.min_p)) return 0;
    *kept = true;
    return sampling::fixed_weight(w);
  };
  u64 local_total = 0;
  long long local_last = -1;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    bool kept;
    local_total += kept_mass(id, &kept);
    if (kept) local_last = id;
  }
  const u64 total = block_sum(local_total, s.warp_u64);
  const long long last_kept = block_max_i64(local_last, s);
  const u64 target = sampling::draw_target(total, p.uniform);
  const int64_t drawn = first_exceeding(vocab, target, [&](int64_t id) {
    bool kept;
    return kept_mass(id, &kept);
  }, s);
  if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int32_t>(drawn >= 0 ? drawn : last_kept);
}

// ----- penalties: widen, count, penalise (sampling_math.h) -------------------------------------
// Only ids in a row's history change, so the count and penalise passes run over the history, not the
// vocabulary; the occurrence words are the only vocabulary-sized state, and the penalise pass leaves
// them zeroed (so they are cleared once, when allocated, not per call).

constexpr int kPenaltyThreads = 256;
constexpr int64_t kMaxBlocksPerRow = 64;

unsigned blocks_per_row(int64_t elements) {
  const int64_t blocks = (elements + kPenaltyThreads * 4 - 1) / (kPenaltyThreads * 4);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocksPerRow ? kMaxBlocksPerRow : blocks));
}

// The history positions of a row that block (blockIdx.y of gridDim.y) thread handles: first, step.
__device__ __forceinline__ int64_t history_start(const sampling::PenaltyRow& p) {
  return sampling::first_counted_position(p) + static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t history_step() { return static_cast<int64_t>(gridDim.y) * blockDim.x; }

template <typename T>
__global__ void __launch_bounds__(kPenaltyThreads) widen_rows_kernel(float* out, Rows logits,
                                                                     const sampling::PenaltyRow* rows) {
  const int64_t vocab = logits.row_size;
  const T* x = row_ptr<const T>(logits, rows[blockIdx.x].logits_row);
  float* dst = out + static_cast<int64_t>(blockIdx.x) * vocab;
  for (int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; i < vocab;
       i += static_cast<int64_t>(gridDim.y) * blockDim.x)
    dst[i] = to_f32(x[i]);
}

__global__ void __launch_bounds__(kPenaltyThreads) count_history_kernel(uint32_t* words, int64_t vocab,
                                                                        const sampling::PenaltyRow* rows,
                                                                        const int32_t* history) {
  const sampling::PenaltyRow p = rows[blockIdx.x];
  uint32_t* row_words = words + static_cast<int64_t>(blockIdx.x) * vocab;
  const int32_t* ids = history + p.history_offset;
  const int64_t end = static_cast<int64_t>(p.num_prompt_tokens) + p.num_output_tokens;
  for (int64_t i = history_start(p); i < end; i += history_step()) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) continue;
    if (i < p.num_prompt_tokens) atomicOr(&row_words[id], sampling::kInPromptBit);
    else atomicAdd(&row_words[id], 1u);
  }
}

template <typename T>
__global__ void __launch_bounds__(kPenaltyThreads) penalise_kernel(float* out, Rows logits, uint32_t* words,
                                                                   const sampling::PenaltyRow* rows,
                                                                   const int32_t* history) {
  const sampling::PenaltyRow p = rows[blockIdx.x];
  const int64_t vocab = logits.row_size;
  const T* x = row_ptr<const T>(logits, p.logits_row);
  float* dst = out + static_cast<int64_t>(blockIdx.x) * vocab;
  uint32_t* row_words = words + static_cast<int64_t>(blockIdx.x) * vocab;
  const int32_t* ids = history + p.history_offset;
  const int64_t end = static_cast<int64_t>(p.num_prompt_tokens) + p.num_output_tokens;
  for (int64_t i = history_start(p); i < end; i += history_step()) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) continue;
    // The first thread to reach an id takes its whole word (and clears it); later ones find 0. The
    // value written depends only on the raw logit and the word, not on which thread wins.
    const uint32_t word = atomicExch(&row_words[id], 0u);
    if (word != 0) dst[id] = sampling::penalised_logit(to_f32(x[id]), sampling::output_count_of(word), p);
  }
}

// ----- logprobs: one block per row -------------------------------------------------------------
//   max (f32) -> sum of exp(x - max) (f64) -> radix select of the num_top-th key of the f32 logprobs
//   (the sampler's top_k_cut over logprob keys) -> collect the kept tokens -> one thread sorts them.

template <typename T>
__global__ void __launch_bounds__(kThreads) logprobs_kernel(int32_t* out_ids, float* out_logprobs, int64_t width,
                                                            Rows logits, const int32_t* ids,
                                                            const sampling::LogprobRow* rows) {
  __shared__ Shared s;
  const sampling::LogprobRow r = rows[blockIdx.x];
  const T* x = row_ptr<const T>(logits, r.logits_row);
  const int64_t vocab = logits.row_size;
  int32_t* row_ids = out_ids + static_cast<int64_t>(blockIdx.x) * width;
  float* row_logprobs = out_logprobs + static_cast<int64_t>(blockIdx.x) * width;

  float local_max = -INFINITY;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) local_max = fmaxf(local_max, to_f32(x[id]));
  const float max_logit = block_max(local_max, s);
  double local_sum = 0.0;
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads)
    local_sum += exp(static_cast<double>(to_f32(x[id])) - static_cast<double>(max_logit));
  const double log_sum = log(block_sum(local_sum, s.warp_f64)) + static_cast<double>(max_logit);
  auto logprob = [&](int64_t id) { return sampling::logprob_of(to_f32(x[id]), log_sum); };
  auto key_of = [&](int64_t id) { return sampling::order_key(logprob(id)); };

  for (int64_t c = threadIdx.x; c < width; c += kThreads) {
    row_ids[c] = -1;
    row_logprobs[c] = 0.0f;
  }
  if (threadIdx.x == 0) s.num_top_found = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t token = ids[r.id_index];
    row_ids[0] = token;
    if (token >= 0 && token < vocab) row_logprobs[0] = logprob(token);
  }
  int64_t k = r.num_top;
  if (k > width - 1) k = width - 1;
  if (k > sampling::kMaxTopLogprobs) k = sampling::kMaxTopLogprobs;
  if (k > vocab) k = vocab;
  if (k <= 0) return;

  Cut cut;  // every token (k == vocab)
  if (k < vocab) cut = top_k_cut(vocab, static_cast<int32_t>(k), s, key_of);
  for (int64_t id = threadIdx.x; id < vocab; id += kThreads) {
    const uint32_t key = key_of(id);
    if (!cut.contains(key, id)) continue;
    const int slot = atomicAdd(&s.num_top_found, 1);  // exactly k tokens pass; sorted below
    if (slot < sampling::kMaxTopLogprobs) {
      s.top_id[slot] = static_cast<int32_t>(id);
      s.top_key[slot] = key;
    }
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int n = s.num_top_found < k ? s.num_top_found : static_cast<int>(k);
  for (int i = 1; i < n; ++i) {  // insertion sort: key descending, then id ascending
    const int32_t id = s.top_id[i];
    const uint32_t key = s.top_key[i];
    int j = i;
    for (; j > 0 && (s.top_key[j - 1] < key || (s.top_key[j - 1] == key && s.top_id[j - 1] > id)); --j) {
      s.top_id[j] = s.top_id[j - 1];
      s.top_key[j] = s.top_key[j - 1];
    }
    s.top_id[j] = id;
    s.top_key[j] = key;
  }
  for (int i = 0; i < n; ++i) {
    row_ids[1 + i] = s.top_id[i];
    row_logprobs[1 + i] = logprob(s.top_id[i]);
  }
}

// ----- logit constraints: grammar bitmasks and logit_bias -----------------------------------------

template <typename T>
__global__ void apply_token_bitmask_kernel(Rows logits, const uint32_t* __restrict__ bitmask,
                                           const int32_t* __restrict__ rows) {
  const int64_t i = blockIdx.x;
  const int64_t vocab = logits.row_size, words = (vocab + 31) / 32;
  const int32_t r = rows[i];
  if (r < 0 || r >= logits.num_rows) __trap();  // CPU twin: CHECK
  T* row = row_ptr<T>(logits, r);
  const uint32_t* mask = bitmask + i * words;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
    if (((mask[v / 32] >> (v % 32)) & 1u) == 0) row[v] = from_f32<T>(-INFINITY);
}

template <typename T>
__global__ void add_logit_bias_kernel(Rows logits, const int32_t* __restrict__ entries, int64_t num_entries) {
  for (int64_t k = 0; k < num_entries; ++k) {  // in order: repeats add up as on the host
    const int32_t r = entries[3 * k], token = entries[3 * k + 1];
    if (r < 0 || r >= logits.num_rows || token < 0 || token >= logits.row_size) __trap();
    T* at = row_ptr<T>(logits, r) + token;
    *at = from_f32<T>(__fadd_rn(to_f32(*at), __int_as_float(entries[3 * k + 2])));
  }
}

}  // namespace

cudaError_t launch_apply_token_bitmask(DType dtype, Rows logits, const uint32_t* bitmask, const int32_t* rows,
                                       int64_t num_rows, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    apply_token_bitmask_kernel<decltype(t)><<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(logits, bitmask,
                                                                                                        rows);
    return cudaGetLastError();
  });
}

cudaError_t launch_add_logit_bias(DType dtype, Rows logits, const int32_t* entries, int64_t num_entries,
                                  cudaStream_t stream) {
  if (num_entries == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    add_logit_bias_kernel<decltype(t)><<<1, 1, 0, stream>>>(logits, entries, num_entries);
    return cudaGetLastError();
  });
}

cudaError_t launch_sample(DType dtype, int32_t* ids, Rows logits, const sampling::RowParams* params,
                          cudaStream_t stream) {
  if (logits.num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    sample_kernel<decltype(t)><<<static_cast<unsigned>(logits.num_rows), kThreads, 0, stream>>>(ids, logits, params);
    return cudaGetLastError();
  });
}

cudaError_t launch_apply_penalties(DType dtype, float* out, Rows logits, const sampling::PenaltyRow* rows,
                                   int64_t num_rows, const int32_t* history, int64_t max_history_tokens,
                                   uint32_t* occurrence_words, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  const int64_t vocab = logits.row_size;
  const dim3 widen_grid(static_cast<unsigned>(num_rows), blocks_per_row(vocab));
  const dim3 history_grid(static_cast<unsigned>(num_rows), blocks_per_row(max_history_tokens));
  return dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    widen_rows_kernel<T><<<widen_grid, kPenaltyThreads, 0, stream>>>(out, logits, rows);
    count_history_kernel<<<history_grid, kPenaltyThreads, 0, stream>>>(occurrence_words, vocab, rows, history);
    penalise_kernel<T><<<history_grid, kPenaltyThreads, 0, stream>>>(out, logits, occurrence_words, rows, history);
    return cudaGetLastError();
  });
}

cudaError_t launch_logprobs(DType dtype, int32_t* out_ids, float* out_logprobs, int64_t width, Rows logits,
                            const int32_t* ids, const sampling::LogprobRow* rows, int64_t num_rows,
                            cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  return dispatch_float(dtype, [&](auto t) {
    logprobs_kernel<decltype(t)><<<static_cast<unsigned>(num_rows), kThreads, 0, stream>>>(
        out_ids, out_logprobs, width, logits, ids, rows);
    return cudaGetLastError();
  });
}

}  // namespace pagellm::cuda
