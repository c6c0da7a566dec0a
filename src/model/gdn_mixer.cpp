#include "model/gdn_mixer.h"

#include <algorithm>
#include <cstring>

namespace pagellm {

namespace {

// Activation buffers of the mixer, by index.
enum Buffer : size_t { kInProj, kConvOut, kCore, kNumBuffers };

// Columns [first_col, first_col + width) of a row-major [T, C] buffer as a [T, width] view.
TensorView column_view(const TensorView& rows_2d, int64_t first_col, int64_t width) {
  CHECK(rows_2d.ndim() == 2 && rows_2d.strides[1] == 1 && first_col + width <= rows_2d.size(1));
  TensorView view = rows_2d;
  view.data = static_cast<char*>(rows_2d.data) + static_cast<size_t>(first_col) * dtype_size_bytes(rows_2d.dtype);
  view.shape = Shape{rows_2d.size(0), width};
  return view;
}

// Qwen3-Next's in_proj_qkvz [2 key_dim + 2 value_dim, H] and in_proj_ba [2 Hv, H] hold, per key
// head g, the rows   qkvz: [ q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv) ]   ba: [ b_g (r) | a_g (r) ]
// (r = Hv / Hk value heads per key head). Regrouped into the fused Qwen3.5 order q | k | v | z | b | a.
std::vector<float> regroup_qwen3_next(const std::vector<float>& qkvz, const std::vector<float>& ba,
                                      const GdnShape& s) {
  const int64_t h = s.hidden, r = s.num_v_heads / s.num_k_heads, group = 2 * s.dk + 2 * r * s.dv;
  std::vector<float> fused(static_cast<size_t>(s.in_proj_rows() * h));
  auto copy_rows = [&](const std::vector<float>& src, int64_t src_row, int64_t dst_row, int64_t rows) {
    std::memcpy(fused.data() + dst_row * h, src.data() + src_row * h, static_cast<size_t>(rows * h) * sizeof(float));
  };
  const int64_t z_base = s.conv_dim(), b_base = s.conv_dim() + s.value_dim(), a_base = b_base + s.num_v_heads;
  for (int64_t g = 0; g < s.num_k_heads; ++g) {
    const int64_t src = g * group;
    copy_rows(qkvz, src, g * s.dk, s.dk);                                            // q
    copy_rows(qkvz, src + s.dk, s.key_dim() + g * s.dk, s.dk);                       // k
    copy_rows(qkvz, src + 2 * s.dk, 2 * s.key_dim() + g * r * s.dv, r * s.dv);       // v
    copy_rows(qkvz, src + 2 * s.dk + r * s.dv, z_base + g * r * s.dv, r * s.dv);     // z
    copy_rows(ba, g * 2 * r, b_base + g * r, r);                                     // b
    copy_rows(ba, g * 2 * r + r, a_base + g * r, r);                                 // a
  }
  return fused;
}

// The in_proj rows (fused order q | k | v | z | b | a) and conv1d channels (q | k | v) of a shard's heads.
struct ShardRows {
  ShardRange q, k, v, z, b, a;
  std::vector<ShardRange> conv() const { return {q, k, v}; }
  std::vector<ShardRange> in_proj() const { return {q, k, v, z, b, a}; }
};

ShardRows shard_rows_of(const GdnShape& s, const GdnShard& shard) {
  const GdnShape& l = shard.local;
  const int64_t z_base = s.conv_dim(), b_base = z_base + s.value_dim(), a_base = b_base + s.num_v_heads;
  return {{shard.k_head_begin * s.dk, l.key_dim()},
          {s.key_dim() + shard.k_head_begin * s.dk, l.key_dim()},
          {2 * s.key_dim() + shard.v_head_begin * s.dv, l.value_dim()},
          {z_base + shard.v_head_begin * s.dv, l.value_dim()},
          {b_base + shard.v_head_begin, l.num_v_heads},
          {a_base + shard.v_head_begin, l.num_v_heads}};
}

// The rows `ranges` of a host row-major [*, cols] matrix, stacked in order.
std::vector<float> take_rows(const std::vector<float>& host, int64_t cols, const std::vector<ShardRange>& ranges) {
  std::vector<float> out;
  for (const ShardRange& r : ranges)
    out.insert(out.end(), host.begin() + r.begin * cols, host.begin() + (r.begin + r.count) * cols);
  return out;
}

Expected<layers::Linear> load_in_proj(WeightLoader& loader, Backend& backend, DType weight_dtype, const GdnShape& s,
                                      const GdnShard& shard, const std::string& p) {
  const int64_t h = s.hidden;
  const bool whole = loader.tp_size() == 1;
  const ShardRows rows = shard_rows_of(s, shard);
  if (loader.has(p + "in_proj_qkvz.weight")) {  // dense only: the regrouping permutes rows of a plain matrix
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> qkvz,
                             loader.load_host_f32(p + "in_proj_qkvz.weight", {s.conv_dim() + s.value_dim(), h}));
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> ba, loader.load_host_f32(p + "in_proj_ba.weight", {2 * s.num_v_heads, h}));
    std::vector<float> fused = regroup_qwen3_next(qkvz, ba, s);
    if (!whole) fused = take_rows(fused, h, rows.in_proj());
    layers::Linear linear;
    linear.weight = upload_matrix(backend, fused, Shape{shard.local.in_proj_rows(), h}, weight_dtype);
    return linear;
  }
  if (whole)
    return layers::load_linear(loader,
                               {{p + "in_proj_qkv", s.conv_dim()}, {p + "in_proj_z", s.value_dim()},
                                {p + "in_proj_b", s.num_v_heads}, {p + "in_proj_a", s.num_v_heads}},
                               h, false);
  // Each part of the shard is a slice of one checkpoint tensor (q, k and v of in_proj_qkv are three).
  auto part = [&](const std::string& name, int64_t rows_total, int64_t base, ShardRange r) {
    return layers::LinearPart{p + name, rows_total, r.begin - base, r.count};
  };
  const int64_t z_base = s.conv_dim(), b_base = z_base + s.value_dim(), a_base = b_base + s.num_v_heads;
  return layers::load_linear(loader,
                             {part("in_proj_qkv", s.conv_dim(), 0, rows.q), part("in_proj_qkv", s.conv_dim(), 0, rows.k),
                              part("in_proj_qkv", s.conv_dim(), 0, rows.v),
                              part("in_proj_z", s.value_dim(), z_base, rows.z),
                              part("in_proj_b", s.num_v_heads, b_base, rows.b),
                              part("in_proj_a", s.num_v_heads, a_base, rows.a)},
                             h, false);
}

}  // namespace

Tensor upload_matrix(Backend& backend, const std::vector<float>& host, Shape shape, DType dtype) {
  CHECK(static_cast<int64_t>(host.size()) == shape.numel());
  Tensor staged = Tensor::cpu(shape, dtype);
  convert_from_f32(host.data(), staged.ptr<void>(), dtype, host.size());
  if (backend.device() == Device::kCpu) return staged;
  Tensor device = backend.alloc(shape, dtype);
  backend.copy(device.view(), staged.view());
  return device;
}

Expected<GdnShard> gdn_shard(const GdnShape& shape, int rank, int size) {
  GdnShard shard{shape, 0, 0};
  if (size == 1) return shard;
  const int64_t hk = shape.num_k_heads, hv = shape.num_v_heads;
  if (hv % size != 0)
    return invalid_argument("[model] --tensor-parallel-size {} does not divide linear_num_value_heads {}", size, hv);
  if (hk % size != 0 && size % hk != 0)
    return invalid_argument("[model] --tensor-parallel-size {} and linear_num_key_heads {}: one must divide the other",
                            size, hk);
  shard.local.num_v_heads = hv / size;
  shard.v_head_begin = rank * shard.local.num_v_heads;
  shard.local.num_k_heads = std::max<int64_t>(hk / size, 1);
  // Value head h reads key head h / (Hv / Hk): with fewer key heads than ranks, the rank's value heads share one.
  shard.k_head_begin = hk % size == 0 ? rank * shard.local.num_k_heads : shard.v_head_begin / (hv / hk);
  return shard;
}

Expected<GdnWeights> load_gdn_weights(WeightLoader& loader, Backend& backend, DType weight_dtype,
                                      const GdnShape& s, const std::string& p) {
  PAGELLM_ASSIGN_OR_RETURN(const GdnShard shard, gdn_shard(s, loader.tp_rank(), loader.tp_size()));
  const GdnShape& l = shard.local;
  const bool whole = loader.tp_size() == 1;
  const ShardRange v_heads{shard.v_head_begin, l.num_v_heads};
  GdnWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.in_proj, load_in_proj(loader, backend, weight_dtype, s, shard, p));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> conv, loader.load_host_f32(p + "conv1d.weight", {s.conv_dim(), 1, s.conv_kernel}));
  if (!whole) conv = take_rows(conv, s.conv_kernel, shard_rows_of(s, shard).conv());
  w.conv1d = upload_matrix(backend, conv, Shape{l.conv_dim(), s.conv_kernel}, weight_dtype);
  // The gates are computed in f32 whatever the checkpoint's dtype (spec B.7).
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> a_log, loader.load_host_f32(p + "A_log", {s.num_v_heads}));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> dt_bias, loader.load_host_f32(p + "dt_bias", {s.num_v_heads}));
  if (!whole) {
    a_log = take_rows(a_log, 1, {v_heads});
    dt_bias = take_rows(dt_bias, 1, {v_heads});
  }
  w.a_log = upload_matrix(backend, a_log, Shape{l.num_v_heads}, DType::kF32);
  w.dt_bias = upload_matrix(backend, dt_bias, Shape{l.num_v_heads}, DType::kF32);
  PAGELLM_ASSIGN_OR_RETURN(w.norm, loader.load(p + "norm.weight", {s.dv}));  // per head: the same on every rank
  PAGELLM_ASSIGN_OR_RETURN(w.out_proj, layers::load_linear(loader, {{p + "out_proj", s.hidden}}, s.value_dim(), false,
                                                           layers::shard_columns(loader, {v_heads.begin * s.dv,
                                                                                          l.value_dim()})));
  return w;
}

GdnMixer::GdnMixer(const GdnShape& local, float eps, Backend& backend, DType dtype)
    : shape_(local), eps_(eps), backend_(backend), act_(backend, dtype) {
  act_.define(kInProj, shape_.in_proj_rows());
  act_.define(kConvOut, shape_.conv_dim());
  act_.define(kCore, shape_.value_dim());
}

void GdnMixer::forward(const GdnWeights& w, const StepBatch& batch, const GdnStateView& state,
                       const TensorView& normed, TensorView out) {
  const GdnShape& s = shape_;
  const int64_t num_tokens = batch.num_tokens;
  TensorView in_proj = act_.rows(kInProj, num_tokens);  // [T, conv_dim + value_dim + 2 Hv]
  TensorView conv = act_.rows(kConvOut, num_tokens);    // [T, conv_dim]
  TensorView core = act_.rows(kCore, num_tokens);       // [T, value_dim]
  w.in_proj.forward(backend_, in_proj, normed);

  GdnParams params;
  params.cu_seqlens_q = batch.cu_seqlens_q;
  params.state_slots = batch.state_slots;
  params.max_seqlen_q = batch.max_seqlen_q;
  params.checkpoint_slots = batch.gdn_checkpoint_slots;
  backend_.gdn_conv1d(conv, column_view(in_proj, 0, s.conv_dim()), w.conv1d, state.conv, params);

  const TensorView q = head_columns(conv, 0, s.num_k_heads, s.dk);                 // [T, Hk, dk]
  const TensorView k = head_columns(conv, s.key_dim(), s.num_k_heads, s.dk);       // [T, Hk, dk]
  const TensorView v = head_columns(conv, 2 * s.key_dim(), s.num_v_heads, s.dv);   // [T, Hv, dv]
  const TensorView z = head_columns(in_proj, s.conv_dim(), s.num_v_heads, s.dv);   // [T, Hv, dv]
  const TensorView b = column_view(in_proj, s.conv_dim() + s.value_dim(), s.num_v_heads);                  // [T, Hv]
  const TensorView a = column_view(in_proj, s.conv_dim() + s.value_dim() + s.num_v_heads, s.num_v_heads);  // [T, Hv]
  TensorView core_heads = core.reshape({num_tokens, s.num_v_heads, s.dv});
  backend_.gdn_delta_rule(core_heads, q, k, v, a, b, w.a_log, w.dt_bias, state.recurrent, params);
  backend_.gated_rms_norm(core_heads, core_heads, z, w.norm, eps_);  // in place, row by row
  w.out_proj.forward(backend_, out, core);
}

}  // namespace pagellm
