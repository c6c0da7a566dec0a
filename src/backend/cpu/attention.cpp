#include "backend/cpu/attention.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagellm::cpu {
namespace {

bool is_float_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}
// What a KV cache may hold: a float dtype, or f8_e4m3 (the FP8 KV cache, scaled: backend.h KvScales).
bool is_cache_dtype(DType dtype) { return is_float_dtype(dtype) || dtype == DType::kF8E4M3; }

// ---------------------------------------------------------------------------------------------
// write_kv
// ---------------------------------------------------------------------------------------------

// Byte address of element offset `offset` (64-bit) in a view's data.
inline char* element_address(const TensorView& view, int64_t offset) {
  return static_cast<char*>(view.data) + offset * static_cast<int64_t>(dtype_size_bytes(view.dtype));
}

void check_cache_view(const TensorView& cache, const char* name) {
  CHECK_MSG(cache.ndim() == 4,
            "[attention] {} must be [num_blocks, block_size, num_kv_heads, head_dim], got {}", name,
            cache.shape.to_string());
  CHECK_MSG(is_cache_dtype(cache.dtype), "[attention] {} dtype {} is not f32/bf16/f16/f8_e4m3", name,
            dtype_name(cache.dtype));
  CHECK_MSG(cache.strides[3] == 1, "[attention] {} head_dim must be contiguous", name);
  CHECK(cache.device == Device::kCpu);
}

void check_rows_view(const TensorView& rows, const char* name) {
  CHECK_MSG(rows.ndim() == 3, "[attention] {} must be [T, heads, head_dim], got {}", name,
            rows.shape.to_string());
  CHECK_MSG(is_float_dtype(rows.dtype), "[attention] {} dtype {} is not f32/bf16/f16", name,
            dtype_name(rows.dtype));
  CHECK_MSG(rows.strides[2] == 1, "[attention] {} head_dim must be contiguous", name);
  CHECK(rows.device == Device::kCpu);
}

// Copies `count` elements between float dtypes, rounding once when they differ.
void copy_elements(const char* src, DType src_dtype, char* dst, DType dst_dtype, int64_t count,
                   std::vector<float>& tmp) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, static_cast<size_t>(count) * dtype_size_bytes(src_dtype));
    return;
  }
  tmp.resize(static_cast<size_t>(count));
  convert_to_f32(src, src_dtype, tmp.data(), static_cast<size_t>(count));
  convert_from_f32(tmp.data(), dst, dst_dtype, static_cast<size_t>(count));
}

// Stores `count` elements into an FP8 cache row as e4m3(x / scale) (a true division, as vLLM's
// reference quantizer; the CUDA twin divides with __fdiv_rn).
void quantize_elements(const char* src, DType src_dtype, uint8_t* dst, float scale, int64_t count,
                       std::vector<float>& tmp) {
  tmp.resize(static_cast<size_t>(count));
  convert_to_f32(src, src_dtype, tmp.data(), static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) dst[i] = f32_to_e4m3_bits(tmp[static_cast<size_t>(i)] / scale);
}

// One row of k or v into a cache row of any cache dtype.
void store_row(const char* src, DType src_dtype, char* dst, DType cache_dtype, float scale, int64_t count,
               std::vector<float>& tmp) {
  if (cache_dtype == DType::kF8E4M3) {
    quantize_elements(src, src_dtype, reinterpret_cast<uint8_t*>(dst), scale, count, tmp);
  } else {
    copy_elements(src, src_dtype, dst, cache_dtype, count, tmp);
  }
}

}  // namespace

void write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k, const TensorView& v,
              const TensorView& slot_mapping, const KvScales& scales) {
  check_cache_view(k_cache, "k_cache");
  check_cache_view(v_cache, "v_cache");
  check_rows_view(k, "k");
  check_rows_view(v, "v");
  CHECK_MSG(k_cache.shape == v_cache.shape, "[write_kv] k_cache {} != v_cache {}", k_cache.shape.to_string(),
            v_cache.shape.to_string());
  CHECK_MSG(k.shape == v.shape, "[write_kv] k {} != v {}", k.shape.to_string(), v.shape.to_string());
  CHECK_MSG(k_cache.dtype != DType::kF8E4M3 || (scales.k_scale > 0 && scales.v_scale > 0),
            "[write_kv] FP8 cache scales must be > 0, got k {} v {}", scales.k_scale, scales.v_scale);
  const int64_t num_tokens = k.size(0), num_kv_heads = k.size(1), head_dim = k.size(2);
  CHECK_MSG(k_cache.size(2) == num_kv_heads && k_cache.size(3) == head_dim,
            "[write_kv] rows {} do not fit cache {}", k.shape.to_string(), k_cache.shape.to_string());
  CHECK_MSG(
      slot_mapping.dtype == DType::kI64 && slot_mapping.numel() == num_tokens && slot_mapping.is_contiguous(),
      "[write_kv] slot_mapping must be [{}] i64", num_tokens);
  const int64_t block_size = k_cache.size(1);
  const int64_t num_slots = k_cache.size(0) * block_size;
  const int64_t* slots = slot_mapping.ptr<int64_t>();

  auto write_tokens = [&](int64_t token_begin, int64_t token_end) {
    std::vector<float> tmp;
    for (int64_t t = token_begin; t < token_end; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      CHECK_MSG(slot < num_slots, "[write_kv] slot {} outside the cache ({} slots)", slot, num_slots);
      const int64_t block = slot / block_size, in_block = slot % block_size;
      for (int64_t h = 0; h < num_kv_heads; ++h) {
        const int64_t k_src = t * k.strides[0] + h * k.strides[1];
        const int64_t v_src = t * v.strides[0] + h * v.strides[1];
        const int64_t k_dst =
            block * k_cache.strides[0] + in_block * k_cache.strides[1] + h * k_cache.strides[2];
        const int64_t v_dst =
            block * v_cache.strides[0] + in_block * v_cache.strides[1] + h * v_cache.strides[2];
        store_row(element_address(k, k_src), k.dtype, element_address(k_cache, k_dst), k_cache.dtype,
                  scales.k_scale, head_dim, tmp);
        store_row(element_address(v, v_src), v.dtype, element_address(v_cache, v_dst), v_cache.dtype,
                  scales.v_scale, head_dim, tmp);
      }
    }
  };
  // Small scatters (decode) are cheaper than waking the pool.
  if (num_tokens * num_kv_heads * head_dim < (int64_t{1} << 16)) {
    write_tokens(0, num_tokens);
  } else {
    ThreadPool::global().parallel_for(num_tokens, write_tokens);
  }
}

// ---------------------------------------------------------------------------------------------
// attention
// ---------------------------------------------------------------------------------------------
//
// Work decomposition (planned on the host before any compute, DESIGN.md rule 6):
//
//   unit  = (sequence, tile of up to kMaxRowsPerTile query rows, range of kv heads). All group =
//           num_heads / num_kv_heads query heads of each kv head ride along, so every K/V row
//           gathered from the cache (and widened to f32) is reused by rows x group query vectors.
//           Prefill tiles take one kv head (rows x group ~ kMaxRowHeadsPerTile); decode tiles take
//           several, so a pass over the context reads each token's K/V rows of all heads together.
//   keys  = split at absolute positions into partitions of kKeyPartition keys, each scanned in
//           chunks of kKeyChunk keys. Each partition yields a partial softmax state (m, l, acc) per
//           query row and head; states are folded in partition order.
//   item  = a unit with a range of its partitions. A unit normally is one item and folds its
//           partitions as it goes. When one unit would dominate a thread's share (long decode,
//           few kv heads), its partitions become several items that write partial states to scratch,
//           and a second pass folds them. Both routes run the same arithmetic in the same order,
//           so results never depend on the split, the batch or the thread count.
//   items are dealt to threads as contiguous runs of about equal estimated cost.

namespace {

constexpr int64_t kKeyChunk = 16;
constexpr int64_t kKeyPartition = 256;  // a multiple of kKeyChunk
constexpr int64_t kMaxRowsPerTile = 16;
constexpr int64_t kMaxRowHeadsPerTile = 64;  // bounds the per-thread state (rows x group x head_dim)
constexpr int64_t kHeadDimBlock = 16;        // acc lanes kept in registers during P.V
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(kKeyPartition % kKeyChunk == 0);

// Validated shapes and raw pointers of one attention call (strides in elements).
struct Problem {
  int64_t num_seqs = 0, num_heads = 0, num_kv_heads = 0, group = 0, head_dim = 0;
  int64_t block_size = 0, num_blocks = 0, max_blocks_per_seq = 0;
  const char* q = nullptr;  // [T, num_heads, head_dim]
  DType q_dtype = DType::kF32;
  int64_t q_stride_row = 0, q_stride_head = 0;
  char* out = nullptr;  // [T, num_heads, head_dim]
  DType out_dtype = DType::kF32;
  int64_t out_stride_row = 0, out_stride_head = 0;
  const char* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const char* v_cache = nullptr;
  DType cache_dtype = DType::kF32;
  int64_t k_stride_block = 0, k_stride_slot = 0, k_stride_head = 0;
  int64_t v_stride_block = 0, v_stride_slot = 0, v_stride_head = 0;
  const int32_t* cu_seqlens_q = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens_k = nullptr;    // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int64_t block_table_stride = 0;
  float scale = 1.0f, softcap = 0.0f;
  bool causal = true;
  int64_t window = 0;  // 0 = off
  float k_scale = 1.0f, v_scale = 1.0f;  // FP8 caches: stored values times these (KvScales)
  const float* sinks = nullptr;          // [num_heads] or none (AttentionParams::sinks)
};

// Keys [begin, end) that the query at absolute position `pos` sees in a context of `context_len`.
struct KeyRange {
  int64_t begin = 0, end = 0;
};

KeyRange visible_keys(const Problem& p, int64_t pos, int64_t context_len) {
  KeyRange range{0, context_len};
  if (p.causal) range.end = std::min(range.end, pos + 1);
  if (p.window > 0) range.begin = std::max<int64_t>(0, pos - p.window + 1);
  if (range.end < range.begin) range.end = range.begin;
  return range;
}

Problem make_problem(TensorView out, const TensorView& q, const TensorView& k_cache,
                     const TensorView& v_cache, const AttentionParams& params) {
  check_rows_view(q, "q");
  check_rows_view(out, "out");
  check_cache_view(k_cache, "k_cache");
  check_cache_view(v_cache, "v_cache");
  CHECK_MSG(q.shape == out.shape, "[attention] q {} != out {}", q.shape.to_string(), out.shape.to_string());
  CHECK_MSG(k_cache.shape == v_cache.shape && k_cache.dtype == v_cache.dtype,
            "[attention] k_cache {} and v_cache {} differ", k_cache.shape.to_string(),
            v_cache.shape.to_string());
  CHECK_MSG(k_cache.size(3) == q.size(2), "[attention] head_dim of q {} != cache {}", q.size(2),
            k_cache.size(3));
  const TensorView& cu = params.cu_seqlens_q;
  const TensorView& lens = params.seq_lens_k;
  const TensorView& tables = params.block_tables;
  CHECK_MSG(cu.dtype == DType::kI32 && lens.dtype == DType::kI32 && tables.dtype == DType::kI32,
            "[attention] cu_seqlens_q, seq_lens_k and block_tables must be i32");
  CHECK(cu.is_contiguous() && lens.is_contiguous() && tables.ndim() == 2 && tables.strides[1] == 1);

  Problem p;
  p.num_seqs = lens.numel();
  CHECK_MSG(cu.numel() == p.num_seqs + 1, "[attention] cu_seqlens_q has {} entries for {} sequences",
            cu.numel(), p.num_seqs);
  CHECK_MSG(tables.size(0) == p.num_seqs, "[attention] block_tables has {} rows for {} sequences",
            tables.size(0), p.num_seqs);
  p.num_heads = q.size(1);
  p.num_kv_heads = k_cache.size(2);
  CHECK_MSG(p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
            "[attention] {} query heads do not share {} kv heads evenly", p.num_heads, p.num_kv_heads);
  p.group = p.num_heads / p.num_kv_heads;
  p.head_dim = q.size(2);
  p.num_blocks = k_cache.size(0);
  p.block_size = k_cache.size(1);
  p.max_blocks_per_seq = tables.size(1);
  p.q = static_cast<const char*>(q.data);
  p.q_dtype = q.dtype;
  p.q_stride_row = q.strides[0];
  p.q_stride_head = q.strides[1];
  p.out = static_cast<char*>(out.data);
  p.out_dtype = out.dtype;
  p.out_stride_row = out.strides[0];
  p.out_stride_head = out.strides[1];
  p.k_cache = static_cast<const char*>(k_cache.data);
  p.v_cache = static_cast<const char*>(v_cache.data);
  p.cache_dtype = k_cache.dtype;
  p.k_stride_block = k_cache.strides[0];
  p.k_stride_slot = k_cache.strides[1];
  p.k_stride_head = k_cache.strides[2];
  p.v_stride_block = v_cache.strides[0];
  p.v_stride_slot = v_cache.strides[1];
  p.v_stride_head = v_cache.strides[2];
  p.cu_seqlens_q = cu.ptr<int32_t>();
  p.seq_lens_k = lens.ptr<int32_t>();
  p.block_tables = tables.ptr<int32_t>();
  p.block_table_stride = tables.strides[0];
  p.scale = params.scale;
  p.softcap = params.softcap;
  p.causal = params.causal;
  p.window = params.sliding_window > 0 ? params.sliding_window : 0;
  p.k_scale = params.kv_scales.k_scale;
  p.v_scale = params.kv_scales.v_scale;
  if (params.sinks.data != nullptr) {
    CHECK_MSG(params.sinks.dtype == DType::kF32 && params.sinks.numel() == p.num_heads && params.sinks.is_contiguous(),
              "[attention] sinks must be [{}] f32, got {} {}", p.num_heads, params.sinks.shape.to_string(),
              dtype_name(params.sinks.dtype));
    p.sinks = params.sinks.ptr<float>();
  }

  const int64_t num_tokens = q.size(0);
  CHECK_MSG(p.cu_seqlens_q[0] == 0, "[attention] cu_seqlens_q[0] = {}", p.cu_seqlens_q[0]);
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    const int64_t q_len = p.cu_seqlens_q[s + 1] - p.cu_seqlens_q[s];
    const int64_t context_len = p.seq_lens_k[s];
    CHECK_MSG(q_len >= 0 && context_len >= 0 && q_len <= context_len,
              "[attention] sequence {}: q_len {} context {}", s, q_len, context_len);
    CHECK_MSG(context_len <= p.max_blocks_per_seq * p.block_size,
              "[attention] sequence {}: context {} exceeds its block table ({} blocks of {})", s, context_len,
              p.max_blocks_per_seq, p.block_size);
  }
  CHECK_MSG(p.cu_seqlens_q[p.num_seqs] <= num_tokens, "[attention] cu_seqlens_q ends at {} past T = {}",
            p.cu_seqlens_q[p.num_seqs], num_tokens);
  return p;
}

// ----- planning -------------------------------------------------------------------------------

struct Unit {
  int64_t seq = 0;
  int64_t kv_head_begin = 0, kv_head_end = 0;  // kv heads [begin, end) with all their query heads
  int64_t row_begin = 0, row_end = 0;          // batch rows (token indices)
  int64_t key_begin = 0, key_end = 0;          // union of the rows' visible keys
  int64_t part_begin = 0, part_end = 0;        // key partitions overlapping [key_begin, key_end)
  int64_t scratch_offset = -1;                 // in floats; >= 0 when partitions run as separate items
};

struct Item {
  int64_t unit = 0;
  int64_t part_begin = 0, part_end = 0;
  double cost = 0;
};

struct Plan {
  std::vector<Unit> units;
  std::vector<Item> items;
  std::vector<int64_t> thread_items;  // [num_threads + 1]: items of thread t are [thread_items[t], [t+1])
  std::vector<int64_t> split_units;
  int64_t scratch_floats = 0;
};

int64_t rows_per_tile(const Problem& p) {
  return std::clamp<int64_t>(kMaxRowHeadsPerTile / p.group, 1, kMaxRowsPerTile);
}

// Query heads of a unit; its row-heads are indexed rh = row_in_tile * unit_heads + head - first head.
int64_t unit_heads(const Problem& p, const Unit& u) {
  return (u.kv_head_end - u.kv_head_begin) * p.group;
}
int64_t unit_row_heads(const Problem& p, const Unit& u) {
  return (u.row_end - u.row_begin) * unit_heads(p, u);
}

// Floats of one partial state block: row_heads accumulators of head_dim, then m's, then l's.
int64_t partial_state_floats(const Problem& p, const Unit& u) {
  return unit_row_heads(p, u) * (p.head_dim + 2);
}

double partition_cost(const Problem& p, const Unit& u, int64_t part) {
  const int64_t keys =
      std::min((part + 1) * kKeyPartition, u.key_end) - std::max(part * kKeyPartition, u.key_begin);
  return static_cast<double>(unit_row_heads(p, u)) * static_cast<double>(std::max<int64_t>(keys, 0));
}

Plan make_plan(const Problem& p, int num_threads) {
  Plan plan;
  const int64_t tile = rows_per_tile(p);
  std::vector<double> unit_costs;
  for (int64_t s = 0; s < p.num_seqs; ++s) {
    const int64_t row_first = p.cu_seqlens_q[s], row_last = p.cu_seqlens_q[s + 1];
    const int64_t context_len = p.seq_lens_k[s];
    const int64_t first_pos = context_len - (row_last - row_first);
    for (int64_t r0 = row_first; r0 < row_last; r0 += tile) {
      const int64_t r1 = std::min(r0 + tile, row_last);
      Unit u;
      u.seq = s;
      u.row_begin = r0;
      u.row_end = r1;
      u.key_begin = context_len;
      u.key_end = 0;
      for (int64_t r = r0; r < r1; ++r) {
        const KeyRange keys = visible_keys(p, first_pos + (r - row_first), context_len);
        if (keys.end <= keys.begin) continue;
        u.key_begin = std::min(u.key_begin, keys.begin);
        u.key_end = std::max(u.key_end, keys.end);
      }
      if (u.key_end <= u.key_begin) {
        u.key_begin = u.key_end = 0;
      } else {
        u.part_begin = u.key_begin / kKeyPartition;
        u.part_end = (u.key_end - 1) / kKeyPartition + 1;
      }
      // Short tiles (decode) take several kv heads: the tokens' K/V rows of all heads sit together
      // in the cache, so one pass over the context reads contiguous memory.
      const int64_t kv_heads_per_unit =
          std::clamp<int64_t>(kMaxRowHeadsPerTile / ((r1 - r0) * p.group), 1, p.num_kv_heads);
      for (int64_t g = 0; g < p.num_kv_heads; g += kv_heads_per_unit) {
        u.kv_head_begin = g;
        u.kv_head_end = std::min(g + kv_heads_per_unit, p.num_kv_heads);
        plan.units.push_back(u);
        // Fixed overhead per unit: loading q and writing out.
        unit_costs.push_back(static_cast<double>(unit_row_heads(p, u)) *
                             static_cast<double>(u.key_end - u.key_begin + p.head_dim / 4 + 1));
      }
    }
  }
  double total_cost = 0;
  for (double c : unit_costs) total_cost += c;

  // A unit that would take more than a quarter of one thread's share is split along partitions.
  const double split_cost = total_cost / num_threads / 4;
  for (int64_t i = 0; i < static_cast<int64_t>(plan.units.size()); ++i) {
    Unit& u = plan.units[static_cast<size_t>(i)];
    const bool split =
        num_threads > 1 && u.part_end - u.part_begin >= 2 && unit_costs[static_cast<size_t>(i)] > split_cost;
    if (!split) {
      plan.items.push_back({i, u.part_begin, u.part_end, unit_costs[static_cast<size_t>(i)]});
      continue;
    }
    u.scratch_offset = plan.scratch_floats;
    plan.scratch_floats += (u.part_end - u.part_begin) * partial_state_floats(p, u);
    plan.split_units.push_back(i);
    Item item{i, u.part_begin, u.part_begin, 0.0};
    for (int64_t part = u.part_begin; part < u.part_end; ++part) {
      item.cost += partition_cost(p, u, part);
      item.part_end = part + 1;
      if (item.cost >= split_cost || part + 1 == u.part_end) {
        plan.items.push_back(item);
        item = Item{i, part + 1, part + 1, 0.0};
      }
    }
  }

  // Contiguous runs of items, about total_cost / num_threads each.
  plan.thread_items.assign(static_cast<size_t>(num_threads) + 1, static_cast<int64_t>(plan.items.size()));
  plan.thread_items[0] = 0;
  double cost_before = 0;
  int next_thread = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(plan.items.size()); ++i) {
    const double middle = cost_before + plan.items[static_cast<size_t>(i)].cost / 2;
    while (next_thread < num_threads && middle >= total_cost * next_thread / num_threads) {
      plan.thread_items[static_cast<size_t>(next_thread++)] = i;
    }
    cost_before += plan.items[static_cast<size_t>(i)].cost;
  }
  return plan;
}

// ----- partial softmax states -----------------------------------------------------------------

// Folds a partition's partial state (m, l, acc) into the running one (run_m, run_l, run_acc):
// rescale both to the larger max and add. The one fold used by both the in-item and the scratch
// route, so they agree bit for bit.
void fold_partial(float& run_m, float& run_l, float* run_acc, float m, float l, const float* acc,
                  int64_t head_dim) {
  if (m == kNegInf) return;  // the partition had no visible key for this row
  const float m_new = std::max(run_m, m);
  const float run_scale = std::exp(run_m - m_new);  // 0 for the first partition (run_m = -inf)
  const float part_scale = std::exp(m - m_new);
  run_l = run_l * run_scale + l * part_scale;
  run_m = m_new;
  for (int64_t d = 0; d < head_dim; ++d) run_acc[d] = run_acc[d] * run_scale + acc[d] * part_scale;
}

// Writes acc / l (zeros when no key was visible) to out[row, head, :], rounded once to out's dtype.
// (m, l, acc) is the row's folded softmax state; a head's sink joins it here as one more partial
// state (m = sink, l = 1, no value), once, whichever route folded the keys.
void write_output_row(const Problem& p, int64_t row, int64_t head, float m, float l, const float* acc, float* tmp) {
  if (l > 0) {
    float acc_scale = 1.0f;
    if (p.sinks != nullptr) {
      const float sink = p.sinks[head];
      const float m_new = std::max(m, sink);
      acc_scale = std::exp(m - m_new);
      l = l * acc_scale + std::exp(sink - m_new);
    }
    for (int64_t d = 0; d < p.head_dim; ++d) tmp[d] = acc[d] * acc_scale / l;
  } else {
    std::fill(tmp, tmp + p.head_dim, 0.0f);
  }
  char* dst = p.out + (row * p.out_stride_row + head * p.out_stride_head) *
                          static_cast<int64_t>(dtype_size_bytes(p.out_dtype));
  convert_from_f32(tmp, dst, p.out_dtype, static_cast<size_t>(p.head_dim));
}

// ----- the kernel -----------------------------------------------------------------------------

// Cache element types, widened to f32 as they are gathered.
struct F32Element {
  using Storage = float;
  static float widen(float x) { return x; }
};
struct Bf16Element {
  using Storage = uint16_t;
  static float widen(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};
struct F16Element {
  using Storage = uint16_t;
  static float widen(uint16_t bits) { return f16_bits_to_f32(bits); }
};
// The FP8 KV cache: e4m3 bits widened through a table; the gather then multiplies by the layer's
// k_scale / v_scale (kScaled), so attention sees float(stored) * scale.
struct Fp8Element {
  using Storage = uint8_t;
  static constexpr bool kScaled = true;
  static float widen(uint8_t bits) { return table()[bits]; }
  static const float* table() {
    static const auto values = [] {
      std::array<float, 256> t{};
      for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = e4m3_bits_to_f32(static_cast<uint8_t>(b));
      return t;
    }();
    return values.data();
  }
};
// Whether a cache element type carries scales (float caches are read as they are).
template <typename Element>
constexpr bool is_scaled_element() {
  if constexpr (requires { Element::kScaled; }) {
    return Element::kScaled;
  } else {
    return false;
  }
}

// e^x for x <= 0 (a score minus its running max), in plain arithmetic so that loops over lanes
// vectorise (no libm call, no branch): x = n ln2 + r with |r| <= ln2/2, a degree-6 Taylor
// polynomial for e^r (relative error < 3e-7), 2^n from exponent bits. x <= -87 (and -inf) gives 0.
inline float exp_nonpositive(float x) {
  const float clamped = std::max(x, -87.0f);
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to int
  const float n = (clamped * 1.44269504088896341f + kRoundMagic) - kRoundMagic;
  const float r = (clamped - n * 0.693145751953125f) - n * 1.42860682030941723e-6f;  // ln2 split hi + lo
  float poly = 1.0f / 720;
  poly = poly * r + 1.0f / 120;
  poly = poly * r + 1.0f / 24;
  poly = poly * r + 1.0f / 6;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const float two_to_n = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return x > -87.0f ? poly * two_to_n : 0.0f;
}

// q . k over head_dim with 16 partial sums (vectorisable without reassociation), reduced in a fixed
// order. kN > 0: n == kN known at compile time.
template <int kN>
inline float dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  if constexpr (kN > 0) n = kN;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) partial[j] += a[i + j] * b[i + j];
  }
  if constexpr (kN == 0 || kN % kLanes != 0) {
    for (; i < n; ++i) partial[i % kLanes] += a[i] * b[i];
  }
  for (int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (int64_t j = 0; j < width; ++j) partial[j] += partial[j + width];
  }
  return partial[0];
}

// Per-thread buffers, grown on demand and reused across calls.
struct Workspace {
  std::vector<float> q;        // [row_heads, head_dim]
  std::vector<float> run_acc;  // [row_heads, head_dim]
  std::vector<float> run_m, run_l;
  std::vector<float> part_acc;  // [row_heads, head_dim]
  std::vector<float> part_m, part_l;
  std::vector<float> k_chunk;  // [kKeyChunk, head_dim]
  std::vector<float> v_chunk;  // [kKeyChunk, head_dim]
  std::vector<float> out_row;  // [head_dim]
};

Workspace& thread_workspace() {
  thread_local Workspace ws;
  return ws;
}

// kHeadDim > 0: head_dim known at compile time; 0: any head_dim (read from the problem).
template <int kHeadDim, typename Element>
class TileKernel {
  using Storage = typename Element::Storage;

 public:
  TileKernel(const Problem& p, Workspace& ws)
      : p_(p), ws_(ws), head_dim_(kHeadDim > 0 ? kHeadDim : p.head_dim) {
    const auto hd = static_cast<size_t>(head_dim_);
    ws_.k_chunk.resize(hd * kKeyChunk);
    ws_.v_chunk.resize(hd * kKeyChunk);
    ws_.out_row.resize(hd);
  }

  // Partitions [part_begin, part_end) of unit u: fold and write out, or (split units) store the
  // partial states in scratch.
  void run_item(const Unit& u, int64_t part_begin, int64_t part_end, float* scratch) {
    begin_unit(u);
    const int64_t row_heads = num_rows_ * num_heads_;
    if (u.scratch_offset >= 0) {
      const int64_t block_floats = row_heads * (head_dim_ + 2);
      for (int64_t part = part_begin; part < part_end; ++part) {
        compute_partition(u, part);
        float* dst = scratch + u.scratch_offset + (part - u.part_begin) * block_floats;
        std::copy_n(ws_.part_acc.data(), row_heads * head_dim_, dst);
        std::copy_n(ws_.part_m.data(), row_heads, dst + row_heads * head_dim_);
        std::copy_n(ws_.part_l.data(), row_heads, dst + row_heads * (head_dim_ + 1));
      }
      return;
    }
    std::fill_n(ws_.run_m.data(), row_heads, kNegInf);
    std::fill_n(ws_.run_l.data(), row_heads, 0.0f);
    std::fill_n(ws_.run_acc.data(), row_heads * head_dim_, 0.0f);
    for (int64_t part = part_begin; part < part_end; ++part) {
      compute_partition(u, part);
      for (int64_t rh = 0; rh < row_heads; ++rh) {
        fold_partial(ws_.run_m[rh], ws_.run_l[rh], &ws_.run_acc[rh * head_dim_], ws_.part_m[rh],
                     ws_.part_l[rh], &ws_.part_acc[rh * head_dim_], head_dim_);
      }
    }
    for (int64_t rh = 0; rh < row_heads; ++rh) {
      write_output_row(p_, u.row_begin + rh / num_heads_, first_head_ + rh % num_heads_, ws_.run_m[rh], ws_.run_l[rh],
                       &ws_.run_acc[rh * head_dim_], ws_.out_row.data());
    }
  }

 private:
  // Loads the tile's query vectors (f32) and each row's visible key range.
  void begin_unit(const Unit& u) {
    num_rows_ = u.row_end - u.row_begin;
    num_heads_ = unit_heads(p_, u);
    first_head_ = u.kv_head_begin * p_.group;
    const auto floats = static_cast<size_t>(num_rows_ * num_heads_);
    ws_.q.resize(floats * static_cast<size_t>(head_dim_));
    ws_.run_acc.resize(floats * static_cast<size_t>(head_dim_));
    ws_.part_acc.resize(floats * static_cast<size_t>(head_dim_));
    ws_.run_m.resize(floats);
    ws_.run_l.resize(floats);
    ws_.part_m.resize(floats);
    ws_.part_l.resize(floats);
    const int64_t row_first = p_.cu_seqlens_q[u.seq];
    const int64_t context_len = p_.seq_lens_k[u.seq];
    const int64_t first_pos = context_len - (p_.cu_seqlens_q[u.seq + 1] - row_first);
    const int64_t q_elem_bytes = static_cast<int64_t>(dtype_size_bytes(p_.q_dtype));
    for (int64_t r = 0; r < num_rows_; ++r) {
      const int64_t row = u.row_begin + r;
      row_keys_[r] = visible_keys(p_, first_pos + (row - row_first), context_len);
      for (int64_t h = 0; h < num_heads_; ++h) {
        const char* src =
            p_.q + (row * p_.q_stride_row + (first_head_ + h) * p_.q_stride_head) * q_elem_bytes;
        convert_to_f32(src, p_.q_dtype, &ws_.q[(r * num_heads_ + h) * head_dim_],
                       static_cast<size_t>(head_dim_));
      }
    }
    block_table_ = p_.block_tables + u.seq * p_.block_table_stride;
  }

  // Gathers keys [key_begin, key_end) (inside the chunk starting at chunk_start) into k_chunk and
  // v_chunk, widened to f32; lanes outside the range are zero.
  void gather_chunk(int64_t kv_head, int64_t chunk_start, int64_t key_begin, int64_t key_end) {
    const Storage* k_base = reinterpret_cast<const Storage*>(p_.k_cache);
    const Storage* v_base = reinterpret_cast<const Storage*>(p_.v_cache);
    const int64_t hd = kHeadDim > 0 ? kHeadDim : head_dim_;
    float* k = ws_.k_chunk.data();
    float* v = ws_.v_chunk.data();
    for (int64_t lane = 0; lane < kKeyChunk; ++lane) {
      float* k_lane = k + lane * hd;
      float* v_lane = v + lane * hd;
      const int64_t key = chunk_start + lane;
      if (key < key_begin || key >= key_end) {
        std::fill_n(k_lane, hd, 0.0f);
        std::fill_n(v_lane, hd, 0.0f);
        continue;
      }
      const int64_t block = block_table_[key / p_.block_size];
      CHECK_MSG(block >= 0 && block < p_.num_blocks, "[attention] block id {} outside the cache ({} blocks)",
                block, p_.num_blocks);
      const int64_t in_block = key % p_.block_size;
      const Storage* k_row =
          k_base + block * p_.k_stride_block + in_block * p_.k_stride_slot + kv_head * p_.k_stride_head;
      const Storage* v_row =
          v_base + block * p_.v_stride_block + in_block * p_.v_stride_slot + kv_head * p_.v_stride_head;
      if constexpr (is_scaled_element<Element>()) {
        const float k_scale = p_.k_scale, v_scale = p_.v_scale;
        for (int64_t d = 0; d < hd; ++d) k_lane[d] = Element::widen(k_row[d]) * k_scale;
        for (int64_t d = 0; d < hd; ++d) v_lane[d] = Element::widen(v_row[d]) * v_scale;
      } else {
        for (int64_t d = 0; d < hd; ++d) k_lane[d] = Element::widen(k_row[d]);
        for (int64_t d = 0; d < hd; ++d) v_lane[d] = Element::widen(v_row[d]);
      }
      // Decode is bound by memory latency: ask for this lane's key of the next chunk now.
      // (A prefetch never faults, so a bad block id is still caught only by the CHECK above.)
      const int64_t next_key = key + kKeyChunk;
      if (next_key < prefetch_key_end_) {
        const int64_t next_block = block_table_[next_key / p_.block_size];
        const int64_t next_in_block = next_key % p_.block_size;
        const char* k_next =
            reinterpret_cast<const char*>(k_base + next_block * p_.k_stride_block +
                                          next_in_block * p_.k_stride_slot + kv_head * p_.k_stride_head);
        const char* v_next =
            reinterpret_cast<const char*>(v_base + next_block * p_.v_stride_block +
                                          next_in_block * p_.v_stride_slot + kv_head * p_.v_stride_head);
        for (int64_t byte = 0; byte < hd * static_cast<int64_t>(sizeof(Storage)); byte += 64) {
          __builtin_prefetch(k_next + byte);
          __builtin_prefetch(v_next + byte);
        }
      }
    }
  }

  // Online softmax over the keys of partition `part` for every row and head of the tile, from a
  // fresh state into part_m / part_l / part_acc.
  void compute_partition(const Unit& u, int64_t part) {
    const int64_t row_heads = num_rows_ * num_heads_;
    std::fill_n(ws_.part_m.data(), row_heads, kNegInf);
    std::fill_n(ws_.part_l.data(), row_heads, 0.0f);
    std::fill_n(ws_.part_acc.data(), row_heads * head_dim_, 0.0f);
    const int64_t key_begin = std::max(part * kKeyPartition, u.key_begin);
    const int64_t key_end = std::min((part + 1) * kKeyPartition, u.key_end);
    prefetch_key_end_ = key_end;
    for (int64_t chunk = key_begin / kKeyChunk * kKeyChunk; chunk < key_end; chunk += kKeyChunk) {
      const int64_t chunk_begin = std::max(chunk, key_begin);
      const int64_t chunk_end = std::min(chunk + kKeyChunk, key_end);
      for (int64_t g = u.kv_head_begin; g < u.kv_head_end; ++g) {
        gather_chunk(g, chunk, chunk_begin, chunk_end);
        const int64_t group_first = (g - u.kv_head_begin) * p_.group;  // of the unit's heads
        for (int64_t r = 0; r < num_rows_; ++r) {
          // Lanes this row sees: its visible keys within the chunk. A key outside contributes an
          // exact zero, so skipping it keeps results independent of the tile and the partition.
          const int64_t lane_begin = std::max(row_keys_[r].begin, chunk_begin) - chunk;
          const int64_t lane_end = std::min(row_keys_[r].end, chunk_end) - chunk;
          if (lane_end <= lane_begin) continue;
          for (int64_t gi = 0; gi < p_.group; ++gi) {
            const int64_t rh = r * num_heads_ + group_first + gi;
            update_row(&ws_.q[rh * head_dim_], lane_begin, lane_end, ws_.part_m[rh], ws_.part_l[rh],
                       &ws_.part_acc[rh * head_dim_]);
          }
        }
      }
    }
  }

  // One chunk of the online softmax for one query vector. Every loop runs over all kKeyChunk lanes
  // (fixed trip counts vectorise); lanes outside [lane_begin, lane_end) get weight exactly 0.
  void update_row(const float* q, int64_t lane_begin, int64_t lane_end, float& m, float& l, float* acc) {
    const int64_t hd = kHeadDim > 0 ? kHeadDim : head_dim_;
    const float* k = ws_.k_chunk.data();
    const float scale = p_.scale, softcap = p_.softcap;
    float scores[kKeyChunk];
    for (int64_t lane = 0; lane < kKeyChunk; ++lane)
      scores[lane] = dot<kHeadDim>(q, k + lane * hd, hd) * scale;
    if (softcap > 0) {
      for (int64_t lane = 0; lane < kKeyChunk; ++lane)
        scores[lane] = softcap * std::tanh(scores[lane] / softcap);
    }
    float chunk_max = kNegInf;
    for (int64_t lane = 0; lane < kKeyChunk; ++lane) {
      if (lane < lane_begin || lane >= lane_end) scores[lane] = kNegInf;
      chunk_max = std::max(chunk_max, scores[lane]);
    }
    const float m_new = std::max(m, chunk_max);
    const float correction = m == kNegInf ? 0.0f : exp_nonpositive(m - m_new);
    float weights[kKeyChunk];
    for (int64_t lane = 0; lane < kKeyChunk; ++lane) weights[lane] = exp_nonpositive(scores[lane] - m_new);
    float weight_sum = 0;
    for (int64_t lane = 0; lane < kKeyChunk; ++lane) weight_sum += weights[lane];
    m = m_new;
    l = l * correction + weight_sum;
    // acc = acc * correction + sum_lane weights[lane] * v[lane], a block of head_dim lanes at a time
    // so the block stays in registers across the chunk.
    const float* v = ws_.v_chunk.data();
    int64_t d0 = 0;
    for (; d0 + kHeadDimBlock <= hd; d0 += kHeadDimBlock) {
      float block[kHeadDimBlock];
      for (int64_t i = 0; i < kHeadDimBlock; ++i) block[i] = acc[d0 + i] * correction;
      for (int64_t lane = lane_begin; lane < lane_end; ++lane) {  // other lanes weigh 0
        const float w = weights[lane];
        const float* v_lane = v + lane * hd + d0;
        for (int64_t i = 0; i < kHeadDimBlock; ++i) block[i] += w * v_lane[i];
      }
      for (int64_t i = 0; i < kHeadDimBlock; ++i) acc[d0 + i] = block[i];
    }
    if constexpr (kHeadDim % kHeadDimBlock != 0 || kHeadDim == 0) {  // head_dim not a multiple of the block
      for (; d0 < hd; ++d0) {
        float a = acc[d0] * correction;
        for (int64_t lane = lane_begin; lane < lane_end; ++lane) a += weights[lane] * v[lane * hd + d0];
        acc[d0] = a;
      }
    }
  }

  const Problem& p_;
  Workspace& ws_;
  const int64_t head_dim_;
  int64_t num_rows_ = 0;
  int64_t prefetch_key_end_ = 0;  // keys of the current partition end here
  int64_t num_heads_ = 0;         // query heads of the unit
  int64_t first_head_ = 0;        // its first query head
  KeyRange row_keys_[kMaxRowsPerTile];
  const int32_t* block_table_ = nullptr;
};

// Folds the scratch partial states of split units and writes their rows.
void fold_split_units(const Problem& p, const Plan& plan, const float* scratch) {
  ThreadPool::global().parallel_for(
      static_cast<int64_t>(plan.split_units.size()), [&](int64_t begin, int64_t end) {
        Workspace& ws = thread_workspace();
        ws.run_acc.resize(static_cast<size_t>(p.head_dim));
        ws.out_row.resize(static_cast<size_t>(p.head_dim));
        for (int64_t i = begin; i < end; ++i) {
          const Unit& u = plan.units[static_cast<size_t>(plan.split_units[static_cast<size_t>(i)])];
          const int64_t row_heads = unit_row_heads(p, u);
          const int64_t heads = unit_heads(p, u);
          const int64_t block_floats = partial_state_floats(p, u);
          for (int64_t rh = 0; rh < row_heads; ++rh) {
            float run_m = kNegInf, run_l = 0;
            std::fill_n(ws.run_acc.data(), p.head_dim, 0.0f);
            for (int64_t part = u.part_begin; part < u.part_end; ++part) {
              const float* block = scratch + u.scratch_offset + (part - u.part_begin) * block_floats;
              fold_partial(run_m, run_l, ws.run_acc.data(), block[row_heads * p.head_dim + rh],
                           block[row_heads * (p.head_dim + 1) + rh], block + rh * p.head_dim, p.head_dim);
            }
            write_output_row(p, u.row_begin + rh / heads, u.kv_head_begin * p.group + rh % heads, run_m, run_l,
                             ws.run_acc.data(), ws.out_row.data());
          }
        }
      });
}

// The instruction sets a kernel is compiled for. Both give the same bits: the kernels use only
// elementwise IEEE operations in a fixed order, and no FMA (ISO C++ mode contracts nothing).
enum class Isa { kBaseline, kAvx2 };

// Runs the items of threads [thread_begin, thread_end) of the plan.
template <int kHeadDim, typename Element>
inline void run_thread_items(const Problem& p, const Plan& plan, int64_t thread_begin, int64_t thread_end,
                             float* scratch) {
  TileKernel<kHeadDim, Element> kernel(p, thread_workspace());
  for (int64_t i = plan.thread_items[static_cast<size_t>(thread_begin)];
       i < plan.thread_items[static_cast<size_t>(thread_end)]; ++i) {
    const Item& item = plan.items[static_cast<size_t>(i)];
    kernel.run_item(plan.units[static_cast<size_t>(item.unit)], item.part_begin, item.part_end, scratch);
  }
}

// The same loop with everything inlined into a function compiled for AVX2 (8 floats per op).
template <int kHeadDim, typename Element>
[[gnu::target("avx2"), gnu::flatten]] void run_thread_items_avx2(const Problem& p, const Plan& plan,
                                                                 int64_t thread_begin, int64_t thread_end,
                                                                 float* scratch) {
  run_thread_items<kHeadDim, Element>(p, plan, thread_begin, thread_end, scratch);
}

template <int kHeadDim, typename Element, Isa kIsa>
void run_attention(const Problem& p, const Plan& plan) {
  std::vector<float> scratch(static_cast<size_t>(plan.scratch_floats));
  const int64_t num_parts = static_cast<int64_t>(plan.thread_items.size()) - 1;
  ThreadPool::global().parallel_for(num_parts, [&](int64_t thread_begin, int64_t thread_end) {
    if constexpr (kIsa == Isa::kAvx2) {
      run_thread_items_avx2<kHeadDim, Element>(p, plan, thread_begin, thread_end, scratch.data());
    } else {
      run_thread_items<kHeadDim, Element>(p, plan, thread_begin, thread_end, scratch.data());
    }
  });
  if (!plan.split_units.empty()) fold_split_units(p, plan, scratch.data());
}

// The one dispatch point: instruction set, cache dtype and head_dim become template parameters here.
using AttentionFn = void (*)(const Problem&, const Plan&);

template <typename Element, Isa kIsa>
AttentionFn pick_head_dim(int64_t head_dim) {
  switch (head_dim) {
    case 32: return &run_attention<32, Element, kIsa>;
    case 64: return &run_attention<64, Element, kIsa>;
    case 80: return &run_attention<80, Element, kIsa>;
    case 96: return &run_attention<96, Element, kIsa>;
    case 128: return &run_attention<128, Element, kIsa>;
    case 256: return &run_attention<256, Element, kIsa>;
    default: return &run_attention<0, Element, kIsa>;
  }
}

template <Isa kIsa>
AttentionFn pick_dtype(DType cache_dtype, int64_t head_dim) {
  switch (cache_dtype) {
    case DType::kF32: return pick_head_dim<F32Element, kIsa>(head_dim);
    case DType::kBF16: return pick_head_dim<Bf16Element, kIsa>(head_dim);
    case DType::kF16: return pick_head_dim<F16Element, kIsa>(head_dim);
    case DType::kF8E4M3: return pick_head_dim<Fp8Element, kIsa>(head_dim);
    default: CHECK_MSG(false, "[attention] cache dtype {} is not f32/bf16/f16/f8_e4m3", dtype_name(cache_dtype));
  }
  return nullptr;
}

AttentionFn pick_kernel(DType cache_dtype, int64_t head_dim) {
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  return has_avx2 ? pick_dtype<Isa::kAvx2>(cache_dtype, head_dim)
                  : pick_dtype<Isa::kBaseline>(cache_dtype, head_dim);
}

}  // namespace

void attention(TensorView out, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
               const AttentionParams& params) {
  const Problem problem = make_problem(out, q, k_cache, v_cache, params);
  const Plan plan = make_plan(problem, ThreadPool::global().num_threads());
  pick_kernel(problem.cache_dtype, problem.head_dim)(problem, plan);
}

}  // namespace pagellm::cpu
