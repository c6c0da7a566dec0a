#include "backend/cpu/gdn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/rows.h"
#include "core/thread_pool.h"

namespace pagellm::cpu {

namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1, threshold 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// One element of a float view at element offset `offset`, widened to f32.
float load_elem(const TensorView& v, int64_t offset) {
  float value;
  convert_to_f32(static_cast<const char*>(v.data) + static_cast<size_t>(offset) * dtype_size_bytes(v.dtype),
                 v.dtype, &value, 1);
  return value;
}

void store_elem(TensorView v, int64_t offset, float value) {
  convert_from_f32(&value, static_cast<char*>(v.data) + static_cast<size_t>(offset) * dtype_size_bytes(v.dtype),
                   v.dtype, 1);
}

// `count` contiguous elements of a float view from element offset `offset`, widened to f32.
void load_run(const TensorView& v, int64_t offset, float* dst, int64_t count) {
  convert_to_f32(static_cast<const char*>(v.data) + static_cast<size_t>(offset) * dtype_size_bytes(v.dtype),
                 v.dtype, dst, static_cast<size_t>(count));
}

void store_run(TensorView v, int64_t offset, const float* src, int64_t count) {
  convert_from_f32(src, static_cast<char*>(v.data) + static_cast<size_t>(offset) * dtype_size_bytes(v.dtype),
                   v.dtype, static_cast<size_t>(count));
}

std::vector<float> to_f32(const TensorView& v) {
  CHECK(v.is_contiguous());
  std::vector<float> out(static_cast<size_t>(v.numel()));
  load_run(v, 0, out.data(), v.numel());
  return out;
}

// The token range and state slot of each sequence, and its checkpoints, read once on the host.
struct Checkpoint {
  int64_t num_tokens;  // the state after this many of the sequence's tokens
  int32_t slot;
};

struct SeqTable {
  std::vector<int32_t> begin, length, slot;
  std::vector<std::vector<Checkpoint>> checkpoints;  // [num_seqs], in token order
  explicit SeqTable(const GdnParams& params, int64_t num_slots) {
    const int64_t num_seqs = params.state_slots.numel();
    CHECK_MSG(params.cu_seqlens_q.dtype == DType::kI32 && params.state_slots.dtype == DType::kI32 &&
                  params.cu_seqlens_q.numel() == num_seqs + 1,
              "[gdn] cu_seqlens_q {} and state_slots {} must be i32 [B + 1] and [B]",
              params.cu_seqlens_q.shape.to_string(), params.state_slots.shape.to_string());
    const int32_t* cu = params.cu_seqlens_q.ptr<int32_t>();
    const int32_t* slots = params.state_slots.ptr<int32_t>();
    for (int64_t s = 0; s < num_seqs; ++s) {
      CHECK_MSG(slots[s] >= 0 && slots[s] < num_slots, "[gdn] state slot {} outside [0, {})", slots[s], num_slots);
      CHECK(cu[s + 1] >= cu[s]);
      begin.push_back(cu[s]);
      length.push_back(cu[s + 1] - cu[s]);
      slot.push_back(slots[s]);
    }
    checkpoints.resize(static_cast<size_t>(num_seqs));
    if (params.checkpoint_slots.data == nullptr) return;
    CHECK_MSG(params.checkpoint_slots.dtype == DType::kI32 && params.checkpoint_slots.numel() >= cu[num_seqs],
              "[gdn] checkpoint_slots {} must be i32 [T]", params.checkpoint_slots.shape.to_string());
    const int32_t* targets = params.checkpoint_slots.ptr<int32_t>();
    for (int64_t s = 0; s < num_seqs; ++s) {
      for (int32_t i = 0; i < length[static_cast<size_t>(s)]; ++i) {
        const int32_t target = targets[begin[static_cast<size_t>(s)] + i];
        if (target < 0) continue;
        CHECK_MSG(target < num_slots, "[gdn] checkpoint slot {} outside [0, {})", target, num_slots);
        checkpoints[static_cast<size_t>(s)].push_back({i + 1, target});
      }
    }
  }
  int64_t size() const { return static_cast<int64_t>(begin.size()); }
};

// ---- conv1d ----

constexpr int64_t kConvChannelsPerTask = 256;

}  // namespace

void gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                const GdnParams& params) {
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && x.strides[1] == 1 && out.strides[1] == 1 && weight.ndim() == 2 &&
                conv_state.ndim() == 3 && conv_state.is_contiguous(),
            "[gdn_conv1d] x{} weight{} conv_state{} out{}", x.shape.to_string(), weight.shape.to_string(),
            conv_state.shape.to_string(), out.shape.to_string());
  const int64_t channels = x.size(1), kernel = weight.size(1), history = kernel - 1;
  CHECK_MSG(weight.size(0) == channels && out.size(1) == channels && out.size(0) == x.size(0) &&
                conv_state.size(1) == channels && conv_state.size(2) == history,
            "[gdn_conv1d] x{} weight{} conv_state{} out{}", x.shape.to_string(), weight.shape.to_string(),
            conv_state.shape.to_string(), out.shape.to_string());
  const SeqTable seqs(params, conv_state.size(0));
  const std::vector<float> w = to_f32(weight);
  const int64_t blocks_per_seq = (channels + kConvChannelsPerTask - 1) / kConvChannelsPerTask;
  ThreadPool::global().parallel_for(seqs.size() * blocks_per_seq, [&](int64_t task_begin, int64_t task_end) {
    std::vector<float> u;  // [history | this sequence's inputs] of one channel
    for (int64_t task = task_begin; task < task_end; ++task) {
      const int64_t s = task / blocks_per_seq;
      const int64_t length = seqs.length[static_cast<size_t>(s)], first = seqs.begin[static_cast<size_t>(s)];
      if (length == 0) continue;
      const int64_t c_begin = (task % blocks_per_seq) * kConvChannelsPerTask;
      const int64_t c_end = std::min(channels, c_begin + kConvChannelsPerTask);
      u.resize(static_cast<size_t>(history + length));
      for (int64_t c = c_begin; c < c_end; ++c) {
        const int64_t state_offset = (seqs.slot[static_cast<size_t>(s)] * channels + c) * history;
        load_run(conv_state, state_offset, u.data(), history);
        for (int64_t i = 0; i < length; ++i) u[static_cast<size_t>(history + i)] = load_elem(x, (first + i) * x.strides[0] + c);
        const float* wc = w.data() + c * kernel;
        for (int64_t i = 0; i < length; ++i) {
          float acc = 0.0f;
          for (int64_t j = 0; j < kernel; ++j) acc += wc[j] * u[static_cast<size_t>(i + j)];
          const float y = silu(round_to_dtype(acc, out.dtype));
          store_elem(out, (first + i) * out.strides[0] + c, y);
        }
        store_run(conv_state, state_offset, u.data() + length, history);
        for (const Checkpoint& checkpoint : seqs.checkpoints[static_cast<size_t>(s)])  // u's last K-1 there
          store_run(conv_state, (checkpoint.slot * channels + c) * history, u.data() + checkpoint.num_tokens, history);
      }
    }
  });
}

namespace {

// ---- the gated delta rule ----

// Views and sizes of one gdn_delta_rule call.
struct DeltaRuleArgs {
  TensorView out, q, k, v, a, b;
  float* state = nullptr;
  std::vector<float> a_log, dt_bias;
  int64_t num_k_heads = 0, num_v_heads = 0, dk = 0, dv = 0;
  float q_scale = 1.0f;
};

// Per-worker scratch for one chunk of one (sequence, value head).
struct ChunkScratch {
  std::vector<float> q, k, v, g, beta;  // [L, dk], [L, dk], [L, dv], [L], [L]
  std::vector<float> gamma, attn;       // [L], [L, L]
  std::vector<float> u, w, out;         // [L, dv], [L, dk], [L, dv]
  void resize(int64_t rows, int64_t dk, int64_t dv) {
    const auto n = static_cast<size_t>(rows);
    q.resize(n * static_cast<size_t>(dk));
    k.resize(n * static_cast<size_t>(dk));
    v.resize(n * static_cast<size_t>(dv));
    g.resize(n);
    beta.resize(n);
    gamma.resize(n);
    attn.resize(n * n);
    u.resize(n * static_cast<size_t>(dv));
    w.resize(n * static_cast<size_t>(dk));
    out.resize(n * static_cast<size_t>(dv));
  }
};

// x <- x / sqrt(sum x^2 + 1e-6) * scale (spec B.8: eps inside the sqrt, not rms_norm_eps).
void l2_normalize(float* x, int64_t n, float scale) {
  float sum_sq = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv_norm = 1.0f / std::sqrt(sum_sq + 1e-6f);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv_norm * scale;
}

float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

// Loads rows [first, first + rows) of value head h into scratch: normalised q and k, v, g, beta.
void load_chunk(const DeltaRuleArgs& p, int64_t first, int64_t rows, int64_t h, ChunkScratch& s) {
  const int64_t kh = h / (p.num_v_heads / p.num_k_heads);
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = first + i;
    float* qi = s.q.data() + i * p.dk;
    float* ki = s.k.data() + i * p.dk;
    load_run(p.q, t * p.q.strides[0] + kh * p.q.strides[1], qi, p.dk);
    load_run(p.k, t * p.k.strides[0] + kh * p.k.strides[1], ki, p.dk);
    load_run(p.v, t * p.v.strides[0] + h * p.v.strides[1], s.v.data() + i * p.dv, p.dv);
    l2_normalize(qi, p.dk, 1.0f);
    for (int64_t d = 0; d < p.dk; ++d) qi[d] *= p.q_scale;  // scaled after the norm, as transformers
    l2_normalize(ki, p.dk, 1.0f);
    const float a = load_elem(p.a, t * p.a.strides[0] + h);
    const float b = load_elem(p.b, t * p.b.strides[0] + h);
    s.beta[static_cast<size_t>(i)] = round_to_dtype(sigmoid(b), p.b.dtype);
    s.g[static_cast<size_t>(i)] =
        -std::exp(p.a_log[static_cast<size_t>(h)]) * softplus(a + p.dt_bias[static_cast<size_t>(h)]);
  }
}

// B.9, token by token: S <- e^g S; d = beta (v - S^T k); S <- S + k d^T; o = S^T q.
// after_token(i) sees S after token i (checkpoints may sit after any token of this form).
template <typename AfterToken>
void recurrent_chunk(const DeltaRuleArgs& p, int64_t rows, float* S, ChunkScratch& s, AfterToken&& after_token) {
  const int64_t dk = p.dk, dv = p.dv;
  std::vector<float>& delta = s.u;  // first dv entries reused as the delta vector
  for (int64_t i = 0; i < rows; ++i) {
    const float* q = s.q.data() + i * dk;
    const float* k = s.k.data() + i * dk;
    const float* v = s.v.data() + i * dv;
    float* o = s.out.data() + i * dv;
    const float decay = std::exp(s.g[static_cast<size_t>(i)]), beta = s.beta[static_cast<size_t>(i)];
    for (int64_t e = 0; e < dk * dv; ++e) S[e] *= decay;
    std::fill(delta.begin(), delta.begin() + dv, 0.0f);
    for (int64_t r = 0; r < dk; ++r)
      for (int64_t j = 0; j < dv; ++j) delta[static_cast<size_t>(j)] += S[r * dv + j] * k[r];
    for (int64_t j = 0; j < dv; ++j) delta[static_cast<size_t>(j)] = (v[j] - delta[static_cast<size_t>(j)]) * beta;
    std::fill(o, o + dv, 0.0f);
    for (int64_t r = 0; r < dk; ++r) {
      float* row = S + r * dv;
      for (int64_t j = 0; j < dv; ++j) {
        row[j] += k[r] * delta[static_cast<size_t>(j)];
        o[j] += row[j] * q[r];
      }
    }
    after_token(i);
  }
}

// B.10 for one chunk of `rows` <= kGdnChunkSize tokens (formulas in gdn.h).
void chunked_chunk(const DeltaRuleArgs& p, int64_t rows, float* S, ChunkScratch& s) {
  const int64_t dk = p.dk, dv = p.dv, n = rows;
  float running = 0.0f;
  for (int64_t t = 0; t < n; ++t) s.gamma[static_cast<size_t>(t)] = running += s.g[static_cast<size_t>(t)];
  const float* gamma = s.gamma.data();
  float* A = s.attn.data();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < t; ++j)
      A[t * n + j] = s.beta[static_cast<size_t>(t)] * dot(s.k.data() + t * dk, s.k.data() + j * dk, dk) *
                     std::exp(gamma[t] - gamma[j]);
  // Forward substitution of (I + A) U = diag(beta) V and (I + A) W = diag(beta e^gamma) K.
  for (int64_t t = 0; t < n; ++t) {
    float* u = s.u.data() + t * dv;
    float* w = s.w.data() + t * dk;
    const float beta = s.beta[static_cast<size_t>(t)], beta_decay = beta * std::exp(gamma[t]);
    for (int64_t j = 0; j < dv; ++j) u[j] = beta * s.v[static_cast<size_t>(t * dv + j)];
    for (int64_t d = 0; d < dk; ++d) w[d] = beta_decay * s.k[static_cast<size_t>(t * dk + d)];
    for (int64_t j = 0; j < t; ++j) {
      const float coef = A[t * n + j];
      const float* uj = s.u.data() + j * dv;
      const float* wj = s.w.data() + j * dk;
      for (int64_t e = 0; e < dv; ++e) u[e] -= coef * uj[e];
      for (int64_t d = 0; d < dk; ++d) w[d] -= coef * wj[d];
    }
  }
  // v'_t = u_t - S^T w_t (in place in u); o_t = e^gamma_t S^T q_t + causal intra-chunk part.
  for (int64_t t = 0; t < n; ++t) {
    float* u = s.u.data() + t * dv;
    float* o = s.out.data() + t * dv;
    const float* w = s.w.data() + t * dk;
    const float* q = s.q.data() + t * dk;
    std::fill(o, o + dv, 0.0f);
    for (int64_t r = 0; r < dk; ++r) {
      const float* row = S + r * dv;
      for (int64_t j = 0; j < dv; ++j) {
        u[j] -= w[r] * row[j];
        o[j] += q[r] * row[j];
      }
    }
    const float decay = std::exp(gamma[t]);
    for (int64_t j = 0; j < dv; ++j) o[j] *= decay;
  }
  for (int64_t t = 0; t < n; ++t) {
    float* o = s.out.data() + t * dv;
    const float* q = s.q.data() + t * dk;
    for (int64_t j = 0; j <= t; ++j) {
      const float coef = dot(q, s.k.data() + j * dk, dk) * std::exp(gamma[t] - gamma[j]);
      const float* vp = s.u.data() + j * dv;
      for (int64_t e = 0; e < dv; ++e) o[e] += coef * vp[e];
    }
  }
  // S <- e^gamma_L S + sum_s e^(gamma_L - gamma_s) k_s v'_s^T
  const float last = gamma[n - 1];
  for (int64_t e = 0; e < dk * dv; ++e) S[e] *= std::exp(last);
  for (int64_t t = 0; t < n; ++t) {
    const float decay = std::exp(last - gamma[t]);
    const float* k = s.k.data() + t * dk;
    const float* vp = s.u.data() + t * dv;
    for (int64_t r = 0; r < dk; ++r) {
      const float coef = k[r] * decay;
      float* row = S + r * dv;
      for (int64_t j = 0; j < dv; ++j) row[j] += coef * vp[j];
    }
  }
}

void check_delta_rule_shapes(const TensorView& out, const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& a, const TensorView& b, const TensorView& state) {
  const bool ok = q.ndim() == 3 && k.shape == q.shape && v.ndim() == 3 && out.shape == v.shape &&
                  v.size(0) == q.size(0) && a.ndim() == 2 && b.ndim() == 2 && a.size(0) == q.size(0) &&
                  b.size(0) == q.size(0) && a.size(1) == v.size(1) && b.size(1) == v.size(1) &&
                  a.strides[1] == 1 && b.strides[1] == 1 && q.strides[2] == 1 && k.strides[2] == 1 &&
                  v.strides[2] == 1 && out.strides[2] == 1 && state.ndim() == 4 && state.dtype == DType::kF32 &&
                  state.is_contiguous() && state.size(1) == v.size(1) && state.size(2) == q.size(2) &&
                  state.size(3) == v.size(2) && v.size(1) % q.size(1) == 0;
  CHECK_MSG(ok, "[gdn_delta_rule] q{} k{} v{} a{} b{} state{} out{}", q.shape.to_string(), k.shape.to_string(),
            v.shape.to_string(), a.shape.to_string(), b.shape.to_string(), state.shape.to_string(),
            out.shape.to_string());
}

}  // namespace

void gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& a, const TensorView& b, const TensorView& A_log, const TensorView& dt_bias,
                    TensorView state, const GdnParams& params) {
  check_delta_rule_shapes(out, q, k, v, a, b, state);
  DeltaRuleArgs p;
  p.out = out, p.q = q, p.k = k, p.v = v, p.a = a, p.b = b;
  p.state = state.ptr<float>();
  p.a_log = to_f32(A_log);
  p.dt_bias = to_f32(dt_bias);
  p.num_k_heads = q.size(1);
  p.num_v_heads = v.size(1);
  p.dk = q.size(2);
  p.dv = v.size(2);
  CHECK(static_cast<int64_t>(p.a_log.size()) == p.num_v_heads && static_cast<int64_t>(p.dt_bias.size()) == p.num_v_heads);
  p.q_scale = 1.0f / std::sqrt(static_cast<float>(p.dk));
  const SeqTable seqs(params, state.size(0));
  const int64_t heads = p.num_v_heads;
  ThreadPool::global().parallel_for(seqs.size() * heads, [&](int64_t task_begin, int64_t task_end) {
    ChunkScratch scratch;
    for (int64_t task = task_begin; task < task_end; ++task) {
      const auto s = static_cast<size_t>(task / heads);
      const int64_t h = task % heads, length = seqs.length[s], first = seqs.begin[s];
      float* S = p.state + (seqs.slot[s] * heads + h) * p.dk * p.dv;
      // As the CUDA kernels: sequences shorter than kGdnMinChunkedTokens (decode rows, speculative
      // rows of 1 + k tokens) run token by token, so a speculative row's tokens get the bits of decode.
      const bool recurrent = params.algo == GdnAlgo::kRecurrent ||
                             (params.algo == GdnAlgo::kAuto && length < kGdnMinChunkedTokens);
      const std::vector<Checkpoint>& checkpoints = seqs.checkpoints[s];
      auto next_checkpoint = checkpoints.begin();
      // Copies S to every checkpoint taken after `num_tokens` tokens of the sequence.
      auto save_checkpoints_through = [&](int64_t num_tokens) {
        for (; next_checkpoint != checkpoints.end() && next_checkpoint->num_tokens <= num_tokens; ++next_checkpoint) {
          CHECK_MSG(next_checkpoint->num_tokens == num_tokens, "[gdn_delta_rule] a checkpoint after token {} of a "
                    "sequence is inside a {}-token chunk", next_checkpoint->num_tokens, kGdnChunkSize);
          std::copy_n(S, p.dk * p.dv, p.state + (next_checkpoint->slot * heads + h) * p.dk * p.dv);
        }
      };
      for (int64_t c = 0; c < length; c += kGdnChunkSize) {
        const int64_t rows = std::min<int64_t>(kGdnChunkSize, length - c);
        scratch.resize(rows, p.dk, p.dv);
        load_chunk(p, first + c, rows, h, scratch);
        if (recurrent) recurrent_chunk(p, rows, S, scratch, [&](int64_t i) { save_checkpoints_through(c + i + 1); });
        else chunked_chunk(p, rows, S, scratch);
        for (int64_t i = 0; i < rows; ++i)
          store_run(out, (first + c + i) * out.strides[0] + h * out.strides[1], scratch.out.data() + i * p.dv, p.dv);
        save_checkpoints_through(c + rows);
      }
    }
  });
}

void gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w, float eps) {
  const RowLayout in(x), gate(z), dst(out);
  CHECK_MSG(in.row_size == w.numel() && gate.row_size == in.row_size && dst.row_size == in.row_size &&
                gate.num_rows == in.num_rows && dst.num_rows == in.num_rows,
            "[gated_rms_norm] x{} z{} w{} out{}", x.shape.to_string(), z.shape.to_string(), w.shape.to_string(),
            out.shape.to_string());
  const std::vector<float> weight = to_f32(w);
  const int64_t d = in.row_size;
  ThreadPool::global().parallel_for(in.num_rows, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(d)), zrow(static_cast<size_t>(d));
    for (int64_t r = begin; r < end; ++r) {
      load_row_f32(x, in, r, row.data());
      load_row_f32(z, gate, r, zrow.data());
      double sum_sq = 0.0;
      for (int64_t i = 0; i < d; ++i) sum_sq += static_cast<double>(row[i]) * row[i];
      const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
      for (int64_t i = 0; i < d; ++i) {
        // transformers: weight * normed.to(input dtype), then * silu(z in f32), cast once more.
        const float normed = round_to_dtype(weight[i] * round_to_dtype(row[i] * inv_rms, x.dtype), x.dtype);
        row[i] = normed * silu(zrow[i]);
      }
      store_row_f32(out, dst, r, row.data());
    }
  });
}

}  // namespace pagellm::cpu
