#include "backend/sampling_math.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/backend.h"

namespace pagellm {

namespace sampling {

namespace {

// Sorting the whole vocabulary (151,936 entries) per token would dominate a step, so only as much
// as the cut-offs need is ordered: top-k by selection, top-p on a sorted head that grows only when
// the nucleus is longer than it.
constexpr size_t kSortedHead = 1024;

// How many of ids[0, n) (the top-k set, any order) the top-p prefix keeps; sorts that prefix into
// rank order.
size_t top_p_prefix(std::vector<int32_t>& ids, size_t n, const std::vector<uint64_t>& fixed, float top_p,
                    const auto& rank_less) {
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) total += fixed[static_cast<size_t>(ids[j])];
  const uint64_t target = top_p_target(total, top_p);
  for (size_t sorted = std::min(n, kSortedHead);; sorted = n) {
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(sorted),
                      ids.begin() + static_cast<std::ptrdiff_t>(n), rank_less);
    uint64_t cumulative = 0;
    size_t i = 0;
    while (i < sorted && cumulative < target) cumulative += fixed[static_cast<size_t>(ids[i++])];
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
  auto rank_less = [&](int32_t a, int32_t b) {
    return ranks_before(order_key(logits[a]), a, order_key(logits[b]), b);
  };
  std::vector<int32_t> ids(v);  // candidates; ids[0, n) are kept so far
  std::iota(ids.begin(), ids.end(), 0);
  size_t n = v;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < v) {
    std::nth_element(ids.begin(), ids.begin() + p.top_k, ids.end(), rank_less);
    n = static_cast<size_t>(p.top_k);
  }
  if (p.top_p < 1.0f) n = top_p_prefix(ids, n, fixed, p.top_p, rank_less);

  std::vector<uint8_t> kept(v, 0);  // [vocab]: the walk below goes in id order
  uint64_t total = 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t id = static_cast<size_t>(ids[j]);
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
