#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/rows.h"

namespace pagellm::cpu {

namespace {

// Index of the largest of score(e) over experts not yet in chosen[0, j); ties to the lower index.
template <typename Score>
int32_t select_next(int64_t num_experts, const int32_t* chosen, int64_t j, Score score) {
  int32_t best = -1;
  float best_score = 0.0f;
  for (int32_t e = 0; e < num_experts; ++e) {
    if (std::find(chosen, chosen + j, e) != chosen + j) continue;
    const float s = score(e);
    if (best < 0 || s > best_score) best = e, best_score = s;
  }
  return best;
}

// One token: ids[k] and unrounded weights[k] from logits[E] (backend.h moe_route).
void route_token(const float* logits, int64_t num_experts, int64_t top_k, MoeRouting routing, bool renormalize,
                 int32_t* ids, float* weights) {
  if (routing == MoeRouting::kTopKSoftmax) {
    for (int64_t j = 0; j < top_k; ++j) ids[j] = select_next(num_experts, ids, j, [&](int32_t e) { return logits[e]; });
    const float max_logit = logits[ids[0]];
    float sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) sum += weights[j] = std::exp(logits[ids[j]] - max_logit);
    for (int64_t j = 0; j < top_k; ++j) weights[j] /= sum;
    return;
  }
  const float max_logit = *std::max_element(logits, logits + num_experts);
  std::vector<float> p(static_cast<size_t>(num_experts));
  float sum = 0.0f;
  for (int64_t e = 0; e < num_experts; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logits[e] - max_logit);
  for (float& value : p) value /= sum;
  float top_sum = 0.0f;
  for (int64_t j = 0; j < top_k; ++j) {
    ids[j] = select_next(num_experts, ids, j, [&](int32_t e) { return p[static_cast<size_t>(e)]; });
    top_sum += weights[j] = p[static_cast<size_t>(ids[j])];
  }
  if (renormalize)
    for (int64_t j = 0; j < top_k; ++j) weights[j] /= top_sum;
}

}  // namespace

void moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
               bool renormalize) {
  const int64_t num_tokens = logits.size(0), num_experts = logits.size(1), top_k = topk_ids.size(1);
  CHECK_MSG(logits.ndim() == 2 && topk_ids.dtype == DType::kI32 && topk_weights.dtype == DType::kF32 &&
                topk_ids.is_contiguous() && topk_weights.is_contiguous() && topk_ids.size(0) == num_tokens &&
                topk_weights.shape == topk_ids.shape && top_k >= 1 && top_k <= num_experts,
            "moe_route logits{} topk_ids{} topk_weights{}", logits.shape.to_string(), topk_ids.shape.to_string(),
            topk_weights.shape.to_string());
  const RowLayout rows(logits);
  std::vector<float> row(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    load_row_f32(logits, rows, t, row.data());
    int32_t* ids = topk_ids.ptr<int32_t>() + t * top_k;
    float* weights = topk_weights.ptr<float>() + t * top_k;
    route_token(row.data(), num_experts, top_k, routing, renormalize, ids, weights);
    for (int64_t j = 0; j < top_k; ++j) weights[j] = round_to_dtype(weights[j], logits.dtype);
  }
}

void moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids, int64_t num_experts) {
  const int64_t pairs = topk_ids.numel(), num_tiles = tile_experts.numel();
  CHECK_MSG(topk_ids.dtype == DType::kI32 && tile_pairs.dtype == DType::kI32 && tile_experts.dtype == DType::kI32 &&
                tile_pairs.is_contiguous() && tile_experts.is_contiguous() && topk_ids.is_contiguous() &&
                tile_pairs.numel() == num_tiles * kMoeTileRows && num_tiles >= moe_max_tiles(pairs, num_experts),
            "moe_group tile_pairs{} tile_experts{} topk_ids{} experts {}", tile_pairs.shape.to_string(),
            tile_experts.shape.to_string(), topk_ids.shape.to_string(), num_experts);
  const int32_t* ids = topk_ids.ptr<int32_t>();
  std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(num_experts));
  for (int64_t p = 0; p < pairs; ++p) {
    CHECK_MSG(ids[p] >= 0 && ids[p] < num_experts, "moe_group: expert id {} outside [0, {})", ids[p], num_experts);
    by_expert[static_cast<size_t>(ids[p])].push_back(static_cast<int32_t>(p));
  }
  int32_t* slots = tile_pairs.ptr<int32_t>();
  int32_t* experts = tile_experts.ptr<int32_t>();
  std::fill(slots, slots + num_tiles * kMoeTileRows, -1);
  std::fill(experts, experts + num_tiles, -1);
  int64_t tile = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    const std::vector<int32_t>& mine = by_expert[static_cast<size_t>(e)];
    std::copy(mine.begin(), mine.end(), slots + tile * kMoeTileRows);
    const int64_t used = (static_cast<int64_t>(mine.size()) + kMoeTileRows - 1) / kMoeTileRows;
    std::fill(experts + tile, experts + tile + used, static_cast<int32_t>(e));
    tile += used;
  }
}

void moe_expert_gemm(Backend& ops, TensorView out, const TensorView& x, const MoeExpertWeights& w,
                     const TensorView& tile_pairs, const TensorView& tile_experts, int64_t pairs_per_x_row,
                     std::optional<Activation> act) {
  const int64_t num_experts = w.weight.size(0), n = w.weight.size(1), k = x.size(1);
  const int64_t out_width = act ? n / 2 : n, num_tiles = tile_experts.numel();
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && w.weight.ndim() == 3 && out.size(1) == out_width &&
                (!act || n % 2 == 0) && out.dtype == x.dtype && pairs_per_x_row >= 1 &&
                tile_pairs.numel() == num_tiles * kMoeTileRows && tile_pairs.is_contiguous() &&
                (w.bias.data == nullptr || (w.bias.ndim() == 2 && w.bias.size(0) == num_experts && w.bias.size(1) == n)),
            "moe_expert_gemm out{} x{} weight{} bias{}", out.shape.to_string(), x.shape.to_string(),
            w.weight.shape.to_string(), w.bias.shape.to_string());
  const int32_t* slots = tile_pairs.ptr<int32_t>();
  const int32_t* experts = tile_experts.ptr<int32_t>();
  const RowLayout x_rows(x), out_rows(out);
  const size_t elem = dtype_size_bytes(x.dtype);
  for (int64_t tile = 0; tile < num_tiles;) {
    const int32_t e = experts[tile];
    if (e < 0) break;  // used tiles come first
    CHECK_MSG(e < num_experts, "moe_expert_gemm: tile expert {} outside [0, {})", e, num_experts);
    // The expert's run of tiles, gathered as one product.
    std::vector<int32_t> pairs;
    for (; tile < num_tiles && experts[tile] == e; ++tile)
      for (int64_t r = 0; r < kMoeTileRows; ++r)
        if (slots[tile * kMoeTileRows + r] >= 0) pairs.push_back(slots[tile * kMoeTileRows + r]);
    const auto rows = static_cast<int64_t>(pairs.size());
    Tensor gathered = Tensor::cpu({rows, k}, x.dtype), y = Tensor::cpu({rows, n}, x.dtype);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = pairs[static_cast<size_t>(i)] / pairs_per_x_row;
      CHECK_MSG(r < x_rows.num_rows && pairs[static_cast<size_t>(i)] < out_rows.num_rows,
                "moe_expert_gemm: pair {} outside x{} / out{}", pairs[static_cast<size_t>(i)], x.shape.to_string(),
                out.shape.to_string());
      std::memcpy(gathered.ptr<char>() + static_cast<size_t>(i * k) * elem,
                  static_cast<const char*>(x.data) + static_cast<size_t>(x_rows.offset(r)) * elem,
                  static_cast<size_t>(k) * elem);
    }
    const TensorView weight = w.weight.slice_rows(e, e + 1).reshape({n, w.weight.size(2)});
    if (w.mxfp4())
      ops.matmul_mxfp4(y.view(), gathered.view(), weight, w.scales.slice_rows(e, e + 1).reshape({n, w.scales.size(2)}));
    else
      ops.matmul(y.view(), gathered.view(), weight);
    if (w.bias.data != nullptr) ops.add_bias(y.view(), w.bias.slice_rows(e, e + 1).reshape({n}));
    Tensor result = y;
    if (act) {
      result = Tensor::cpu({rows, out_width}, x.dtype);
      ops.act_mul(result.view(), y.view(), *act);
    }
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(static_cast<char*>(out.data) + static_cast<size_t>(out_rows.offset(pairs[static_cast<size_t>(i)])) * elem,
                  result.ptr<char>() + static_cast<size_t>(i * out_width) * elem, static_cast<size_t>(out_width) * elem);
  }
}

void moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids, const TensorView& topk_weights,
                 bool accumulate) {
  const int64_t num_tokens = topk_ids.size(0), top_k = topk_ids.size(1);
  const RowLayout dst(out), src(y);
  CHECK_MSG(topk_ids.dtype == DType::kI32 && topk_weights.dtype == DType::kF32 && topk_ids.is_contiguous() &&
                topk_weights.shape == topk_ids.shape && topk_weights.is_contiguous() && dst.num_rows == num_tokens &&
                src.num_rows == num_tokens * top_k && src.row_size == dst.row_size,
            "moe_combine out{} y{} topk_ids{} topk_weights{}", out.shape.to_string(), y.shape.to_string(),
            topk_ids.shape.to_string(), topk_weights.shape.to_string());
  std::vector<float> acc(static_cast<size_t>(dst.row_size)), row(static_cast<size_t>(dst.row_size));
  std::vector<int64_t> order(static_cast<size_t>(top_k));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t* ids = topk_ids.ptr<int32_t>() + t * top_k;
    for (int64_t j = 0; j < top_k; ++j) order[static_cast<size_t>(j)] = j;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
    if (accumulate) load_row_f32(out, dst, t, acc.data());
    else std::fill(acc.begin(), acc.end(), 0.0f);
    for (const int64_t j : order) {
      const float w = topk_weights.ptr<float>()[t * top_k + j];
      load_row_f32(y, src, t * top_k + j, row.data());
      for (int64_t c = 0; c < dst.row_size; ++c)
        acc[static_cast<size_t>(c)] = round_to_dtype(acc[static_cast<size_t>(c)] + round_to_dtype(w * row[static_cast<size_t>(c)], out.dtype), out.dtype);
    }
    store_row_f32(out, dst, t, acc.data());
  }
}

}  // namespace pagellm::cpu
