#include "backend/sampling_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace pagellm {

namespace sampling {

namespace {

// Sorting the whole vocabulary (151,936 entries) per token would dominate a step, so only as much
// as the cut-offs need is ordered: top-k by selection, top-p on a sorted head that grows only when
// the nucleus is longer than it.
constexpr size_t kSortedHead = 1024;

// A token's place in rank order as one integer: larger = earlier (key high, id low inverted), so
// selection and sorting compare plain integers.
uint64_t rank_word(float logit, size_t id) {
  return (static_cast<uint64_t>(order_key(logit)) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
size_t id_of(uint64_t word) { return 0xffffffffu - static_cast<uint32_t>(word); }

// How many of ranked[0, n) (the top-k set, any order) the top-p prefix keeps; sorts that prefix
// into rank order.
size_t top_p_prefix(std::vector<uint64_t>& ranked, size_t n, const std::vector<uint64_t>& fixed, float top_p) {
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) total += fixed[id_of(ranked[j])];
  const uint64_t target = top_p_target(total, top_p);
  for (size_t sorted = std::min(n, kSortedHead);; sorted = n) {
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(sorted),
                      ranked.begin() + static_cast<std::ptrdiff_t>(n), std::greater<>());
    uint64_t cumulative = 0;
    size_t i = 0;
    while (i < sorted && cumulative < target) cumulative += fixed[id_of(ranked[i++])];
    if (cumulative >= target || sorted == n) return i;
  }
}

}  // namespace

int32_t draw_token(const float* logits, int64_t vocab, const RowParams& p) {
  const size_t v = static_cast<size_t>(vocab);
  const float max_logit = *std::max_element(logits, logits + v);
  std::vector<float> w(v);          // [vocab] f32, w_max = 1
  std::vector<uint64_t> fixed(v);   // [vocab] W = floor(w * 2^40)
  for (size_t i = 0; i < v; ++i) {
    w[i] = weight(logits[i], max_logit, p.temperature);
    fixed[i] = fixed_weight(w[i]);
  }
  std::vector<uint64_t> ranked(v);  // [vocab] rank_word of each token; ranked[0, n) are kept so far
  for (size_t i = 0; i < v; ++i) ranked[i] = rank_word(logits[i], i);
  size_t n = v;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < v) {
    std::nth_element(ranked.begin(), ranked.begin() + p.top_k, ranked.end(), std::greater<>());
    n = static_cast<size_t>(p.top_k);
  }
  if (p.top_p < 1.0f) n = top_p_prefix(ranked, n, fixed, p.top_p);

  std::vector<uint8_t> kept(v, 0);  // [vocab]: the walk below goes in id order
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t id = id_of(ranked[j]);
    if (!passes_min_p(w[id], p.min_p)) continue;
    kept[id] = 1;
    total += fixed[id];
  }
  const uint64_t target = draw_target(total, p.uniform);
  uint64_t cumulative = 0;
  int32_t last_kept = 0;
  for (size_t i = 0; i < v; ++i) {
    if (!kept[i]) continue;
    cumulative += fixed[i];
    last_kept = static_cast<int32_t>(i);
    if (cumulative > target) return last_kept;
  }
  return last_kept;
}

}  // namespace sampling

void sample_rows_on_host(TensorView ids, const TensorView& logits, const TensorView& params) {
  CHECK_MSG(ids.device == Device::kCpu && logits.device == Device::kCpu && params.device == Device::kCpu,
            "[backend] sample: the host twin needs host views");
  CHECK_MSG(logits.ndim() == 2 && logits.strides[1] == 1, "[backend] sample: logits must be [rows, vocab], got {}",
            logits.shape.to_string());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  CHECK_MSG(ids.dtype == DType::kI32 && ids.numel() == rows, "[backend] sample: ids must be [{}] i32", rows);
  CHECK_MSG(params.dtype == DType::kU8 && params.is_contiguous() &&
                params.nbytes() == static_cast<size_t>(rows) * sizeof(sampling::RowParams),
            "[backend] sample: params must be [{}, {}] u8 (RowParams)", rows, sizeof(sampling::RowParams));
  const char* param_bytes = params.ptr<const char>();
  std::vector<float> row(static_cast<size_t>(vocab));  // [vocab] f32
  const size_t element_bytes = dtype_size_bytes(logits.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    sampling::RowParams p;
    std::memcpy(&p, param_bytes + static_cast<size_t>(r) * sizeof p, sizeof p);
    if (!(p.temperature > 0.0f)) continue;  // argmax rows and rows the host sampler owns
    convert_to_f32(logits.ptr<const char>() + static_cast<size_t>(r * logits.strides[0]) * element_bytes,
                   logits.dtype, row.data(), row.size());
    ids.ptr<int32_t>()[r] = sampling::draw_token(row.data(), vocab, p);
  }
}

namespace {

// A raw-bytes parameter tensor on the host: rows of struct Row, contiguous.
template <typename Row>
Row row_at(const TensorView& rows, int64_t r) {
  Row row;
  std::memcpy(&row, rows.ptr<const char>() + static_cast<size_t>(r) * sizeof row, sizeof row);
  return row;
}

template <typename Row>
int64_t check_param_rows(const TensorView& rows, const char* op) {
  CHECK_MSG(rows.device == Device::kCpu && rows.dtype == DType::kU8 && rows.is_contiguous() &&
                rows.nbytes() % sizeof(Row) == 0,
            "[backend] {}: rows must be [n, {}] u8 on the host, got {}", op, sizeof(Row), rows.shape.to_string());
  return static_cast<int64_t>(rows.nbytes() / sizeof(Row));
}

void check_logits(const TensorView& logits, const char* op) {
  CHECK_MSG(logits.device == Device::kCpu && logits.ndim() == 2 && logits.strides[1] == 1,
            "[backend] {}: logits must be [rows, vocab] on the host, got {}", op, logits.shape.to_string());
}

void widen_row(const TensorView& logits, int64_t r, float* out) {
  CHECK_MSG(r >= 0 && r < logits.size(0), "[backend] logits row {} of {}", r, logits.size(0));
  const size_t element_bytes = dtype_size_bytes(logits.dtype);
  convert_to_f32(logits.ptr<const char>() + static_cast<size_t>(r * logits.strides[0]) * element_bytes, logits.dtype,
                 out, static_cast<size_t>(logits.size(1)));
}

}  // namespace

void apply_penalties_on_host(TensorView out, const TensorView& logits, const TensorView& rows,
                             const TensorView& history) {
  check_logits(logits, "apply_penalties");
  const int64_t num_rows = check_param_rows<sampling::PenaltyRow>(rows, "apply_penalties");
  const int64_t vocab = logits.size(1);
  CHECK_MSG(out.device == Device::kCpu && out.dtype == DType::kF32 && out.is_contiguous() && out.ndim() == 2 &&
                out.size(0) == num_rows && out.size(1) == vocab,
            "[backend] apply_penalties: out must be [{}, {}] f32, got {}", num_rows, vocab, out.shape.to_string());
  CHECK_MSG(history.device == Device::kCpu && history.dtype == DType::kI32 && history.is_contiguous(),
            "[backend] apply_penalties: history must be [H] i32 on the host");
  const int32_t* ids = history.ptr<const int32_t>();
  // The device's counting, in a loop: one occurrence word per id, reset after its row.
  std::vector<uint32_t> words(static_cast<size_t>(vocab), 0);  // [vocab]
  for (int64_t p = 0; p < num_rows; ++p) {
    const auto row = row_at<sampling::PenaltyRow>(rows, p);
    float* x = out.ptr<float>() + p * vocab;
    widen_row(logits, row.logits_row, x);
    const int64_t end = int64_t{row.num_prompt_tokens} + row.num_output_tokens;
    CHECK_MSG(row.history_offset >= 0 && row.history_offset + end <= history.numel(),
              "[backend] apply_penalties: row {} reads history [{}, {}) of {}", p, row.history_offset,
              row.history_offset + end, history.numel());
    const int32_t* row_ids = ids + row.history_offset;
    for (int64_t i = sampling::first_counted_position(row); i < end; ++i) {
      const int32_t id = row_ids[i];
      if (id < 0 || id >= vocab) continue;
      uint32_t& word = words[static_cast<size_t>(id)];
      word = i < row.num_prompt_tokens ? (word | sampling::kInPromptBit) : word + 1;
    }
    for (int64_t i = sampling::first_counted_position(row); i < end; ++i) {
      const int32_t id = row_ids[i];
      if (id < 0 || id >= vocab) continue;
      const uint32_t word = std::exchange(words[static_cast<size_t>(id)], 0);
      if (word != 0) x[id] = sampling::penalised_logit(x[id], sampling::output_count_of(word), row);
    }
  }
}

void logprobs_on_host(TensorView out_ids, TensorView out_logprobs, const TensorView& logits, const TensorView& ids,
                      const TensorView& rows) {
  check_logits(logits, "logprobs");
  const int64_t num_rows = check_param_rows<sampling::LogprobRow>(rows, "logprobs");
  const int64_t vocab = logits.size(1);
  CHECK_MSG(out_ids.device == Device::kCpu && out_ids.dtype == DType::kI32 && out_ids.is_contiguous() &&
                out_ids.ndim() == 2 && out_ids.size(0) == num_rows && out_ids.size(1) >= 1 &&
                out_ids.size(1) <= 1 + sampling::kMaxTopLogprobs,
            "[backend] logprobs: out_ids must be [{}, 1 + K <= {}] i32, got {}", num_rows,
            1 + sampling::kMaxTopLogprobs, out_ids.shape.to_string());
  CHECK_MSG(out_logprobs.device == Device::kCpu && out_logprobs.dtype == DType::kF32 && out_logprobs.is_contiguous() &&
                out_logprobs.shape == out_ids.shape,
            "[backend] logprobs: out_logprobs must be {} f32", out_ids.shape.to_string());
  CHECK_MSG(ids.device == Device::kCpu && ids.dtype == DType::kI32 && ids.is_contiguous(),
            "[backend] logprobs: ids must be [N] i32 on the host");
  const int64_t width = out_ids.size(1);
  std::vector<float> x(static_cast<size_t>(vocab));   // [vocab] f32, the raw row
  std::vector<float> lp(static_cast<size_t>(vocab));  // [vocab] its logprobs
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t l = 0; l < num_rows; ++l) {
    const auto row = row_at<sampling::LogprobRow>(rows, l);
    widen_row(logits, row.logits_row, x.data());
    const float max_value = *std::max_element(x.begin(), x.end());
    double sum = 0.0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - max_value);
    const double log_sum = std::log(sum) + max_value;
    for (size_t i = 0; i < x.size(); ++i) lp[i] = sampling::logprob_of(x[i], log_sum);

    int32_t* row_ids = out_ids.ptr<int32_t>() + l * width;
    float* row_logprobs = out_logprobs.ptr<float>() + l * width;
    std::fill(row_ids, row_ids + width, -1);
    std::fill(row_logprobs, row_logprobs + width, 0.0f);
    CHECK_MSG(row.id_index >= 0 && row.id_index < ids.numel(), "[backend] logprobs: id index {} of {}", row.id_index,
              ids.numel());
    const int32_t token = ids.ptr<const int32_t>()[row.id_index];
    row_ids[0] = token;
    if (token >= 0 && token < vocab) row_logprobs[0] = lp[static_cast<size_t>(token)];
    const int64_t k = std::min<int64_t>({row.num_top, width - 1, vocab});
    if (k <= 0) continue;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float la = lp[static_cast<size_t>(a)], lb = lp[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (int64_t j = 0; j < k; ++j) {
      row_ids[1 + j] = order[static_cast<size_t>(j)];
      row_logprobs[1 + j] = lp[static_cast<size_t>(order[static_cast<size_t>(j)])];
    }
  }
}

void apply_token_bitmask_on_host(TensorView logits, const TensorView& bitmask, const TensorView& rows) {
  CHECK_MSG(logits.device == Device::kCpu && bitmask.device == Device::kCpu && rows.device == Device::kCpu,
            "[backend] apply_token_bitmask: the host twin needs host views");
  CHECK_MSG(logits.ndim() == 2 && logits.strides[1] == 1, "[backend] apply_token_bitmask: logits must be [rows, vocab]");
  const int64_t vocab = logits.size(1), words = (vocab + 31) / 32, n = rows.numel();
  CHECK_MSG(rows.dtype == DType::kI32 && bitmask.dtype == DType::kI32 && bitmask.is_contiguous() &&
                bitmask.numel() == n * words,
            "[backend] apply_token_bitmask: bitmask must be [{}, {}] i32 for {} i32 rows", n, words, n);
  const size_t element_bytes = dtype_size_bytes(logits.dtype);
  const float minus_inf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = rows.ptr<const int32_t>()[i];
    CHECK_MSG(r >= 0 && r < logits.size(0), "[backend] apply_token_bitmask: row {} outside [0, {})", r, logits.size(0));
    char* row = static_cast<char*>(logits.data) + static_cast<size_t>(r * logits.strides[0]) * element_bytes;
    const auto* mask = reinterpret_cast<const uint32_t*>(bitmask.ptr<const int32_t>() + i * words);
    for (int64_t v = 0; v < vocab; ++v)
      if (((mask[v / 32] >> (v % 32)) & 1u) == 0) convert_from_f32(&minus_inf, row + v * element_bytes, logits.dtype, 1);
  }
}

void add_logit_bias_on_host(TensorView logits, const TensorView& entries) {
  CHECK_MSG(logits.device == Device::kCpu && entries.device == Device::kCpu,
            "[backend] add_logit_bias: the host twin needs host views");
  CHECK_MSG(logits.ndim() == 2 && logits.strides[1] == 1, "[backend] add_logit_bias: logits must be [rows, vocab]");
  CHECK_MSG(entries.dtype == DType::kI32 && entries.is_contiguous() && entries.numel() % 3 == 0,
            "[backend] add_logit_bias: entries must be [K, 3] i32");
  const size_t element_bytes = dtype_size_bytes(logits.dtype);
  const int32_t* e = entries.ptr<const int32_t>();
  for (int64_t k = 0; k < entries.numel() / 3; ++k) {
    const int32_t r = e[3 * k], token = e[3 * k + 1];
    CHECK_MSG(r >= 0 && r < logits.size(0) && token >= 0 && token < logits.size(1),
              "[backend] add_logit_bias: ({}, {}) outside [{}, {}]", r, token, logits.size(0), logits.size(1));
    float bias;
    std::memcpy(&bias, &e[3 * k + 2], sizeof(bias));
    char* at = static_cast<char*>(logits.data) + static_cast<size_t>(r * logits.strides[0] + token) * element_bytes;
    float value;
    convert_to_f32(at, logits.dtype, &value, 1);
    value += bias;
    convert_from_f32(&value, at, logits.dtype, 1);
  }
}

}  // namespace pagellm
