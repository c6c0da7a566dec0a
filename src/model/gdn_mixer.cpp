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

Expected<layers::Linear> load_in_proj(WeightLoader& loader, Backend& backend, DType weight_dtype, const GdnShape& s,
                                      const std::string& p) {
  const int64_t h = s.hidden;
  if (loader.has(p + "in_proj_qkvz.weight")) {  // dense only: the regrouping permutes rows of a plain matrix
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> qkvz,
                             loader.load_host_f32(p + "in_proj_qkvz.weight", {s.conv_dim() + s.value_dim(), h}));
    PAGELLM_ASSIGN_OR_RETURN(std::vector<float> ba, loader.load_host_f32(p + "in_proj_ba.weight", {2 * s.num_v_heads, h}));
    layers::Linear linear;
    linear.weight = upload_matrix(backend, regroup_qwen3_next(qkvz, ba, s), Shape{s.in_proj_rows(), h}, weight_dtype);
    return linear;
  }
  return layers::load_linear(loader,
                             {{p + "in_proj_qkv", s.conv_dim()}, {p + "in_proj_z", s.value_dim()},
                              {p + "in_proj_b", s.num_v_heads}, {p + "in_proj_a", s.num_v_heads}},
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

Expected<GdnWeights> load_gdn_weights(WeightLoader& loader, Backend& backend, DType weight_dtype,
                                      const GdnShape& s, const std::string& p) {
  GdnWeights w;
  PAGELLM_ASSIGN_OR_RETURN(w.in_proj, load_in_proj(loader, backend, weight_dtype, s, p));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> conv, loader.load_host_f32(p + "conv1d.weight", {s.conv_dim(), 1, s.conv_kernel}));
  w.conv1d = upload_matrix(backend, conv, Shape{s.conv_dim(), s.conv_kernel}, weight_dtype);
  // The gates are computed in f32 whatever the checkpoint's dtype (spec B.7).
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> a_log, loader.load_host_f32(p + "A_log", {s.num_v_heads}));
  PAGELLM_ASSIGN_OR_RETURN(std::vector<float> dt_bias, loader.load_host_f32(p + "dt_bias", {s.num_v_heads}));
  w.a_log = upload_matrix(backend, a_log, Shape{s.num_v_heads}, DType::kF32);
  w.dt_bias = upload_matrix(backend, dt_bias, Shape{s.num_v_heads}, DType::kF32);
  PAGELLM_ASSIGN_OR_RETURN(w.norm, loader.load(p + "norm.weight", {s.dv}));
  PAGELLM_ASSIGN_OR_RETURN(w.out_proj, layers::load_linear(loader, {{p + "out_proj", s.hidden}}, s.value_dim(), false));
  return w;
}

GdnMixer::GdnMixer(const ModelConfig& config, Backend& backend)
    : shape_(config), eps_(static_cast<float>(config.rms_norm_eps)), backend_(backend), act_(backend, config.dtype) {
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
