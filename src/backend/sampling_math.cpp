#include "backend/sampling_math.h"

#include <algorithm>
#include <functional>
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

}  // namespace pagellm
