// The CPU Gated DeltaNet ops: the chunked delta rule equals the recurrent one and an f64 reference of
// spec/models.md B.7-B.9; a varlen batch equals its sequences run alone (bitwise); a sequence split
// over several calls (chunked prefill) equals one call, the state carried in its slot.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"

namespace pagellm {
namespace {

constexpr int64_t kHk = 2, kHv = 4, kDk = 16, kDv = 8, kConvDim = 2 * kHk * kDk + kHv * kDv, kKernel = 4;
constexpr int kSlots = 5;

Tensor random_tensor(Shape shape, std::mt19937& rng, float scale, float offset = 0.0f) {
  Tensor t = Tensor::cpu(shape, DType::kF32);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = offset + scale * dist(rng);
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor out = Tensor::cpu(t.shape(), t.dtype());
  std::copy(t.ptr<char>(), t.ptr<char>() + t.nbytes(), out.ptr<char>());
  return out;
}

Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.ptr<int32_t>());
  return t;
}

// Inputs of the delta rule for sequences of `lengths` tokens in `slots`, with non-zero incoming states.
struct DeltaCase {
  std::vector<int32_t> lengths, slots, cu;
  Tensor q, k, v, a, b, a_log, dt_bias, state;

  DeltaCase(std::vector<int32_t> lens, std::vector<int32_t> slot_ids, uint32_t seed)
      : lengths(std::move(lens)), slots(std::move(slot_ids)) {
    std::mt19937 rng(seed);
    cu.push_back(0);
    for (int32_t n : lengths) cu.push_back(cu.back() + n);
    const int64_t t = cu.back();
    q = random_tensor({t, kHk, kDk}, rng, 1.0f);
    k = random_tensor({t, kHk, kDk}, rng, 1.0f);
    v = random_tensor({t, kHv, kDv}, rng, 1.0f);
    a = random_tensor({t, kHv}, rng, 1.5f);
    b = random_tensor({t, kHv}, rng, 1.5f);
    a_log = random_tensor({kHv}, rng, 0.7f, 0.5f);
    dt_bias = random_tensor({kHv}, rng, 0.5f, 1.0f);
    state = random_tensor({kSlots, kHv, kDk, kDv}, rng, 0.3f);
  }
  int64_t num_tokens() const { return cu.back(); }

  // Runs the op over sequences [first, last) on `state_inout`; returns out [T_range, Hv, dv].
  // checkpoints: GdnParams::checkpoint_slots over the range's rows, or empty.
  Tensor run(Tensor& state_inout, GdnAlgo algo, size_t first = 0, size_t last = SIZE_MAX,
             const std::vector<int32_t>& checkpoints = {}) const {
    last = std::min(last, lengths.size());
    const int64_t t0 = cu[first], t1 = cu[last];
    std::vector<int32_t> sub_cu, sub_slots;
    for (size_t s = first; s <= last; ++s) sub_cu.push_back(cu[s] - static_cast<int32_t>(t0));
    for (size_t s = first; s < last; ++s) sub_slots.push_back(slots[s]);
    Tensor cu_t = i32_tensor(sub_cu), slots_t = i32_tensor(sub_slots);
    Tensor out = Tensor::cpu({t1 - t0, kHv, kDv}, DType::kF32);
    const Tensor targets = checkpoints.empty() ? Tensor() : i32_tensor(checkpoints);
    GdnParams params{cu_t.view(), slots_t.view(), 0, algo, targets.view()};
    CpuBackend backend;
    backend.gdn_delta_rule(out, q.view().slice_rows(t0, t1), k.view().slice_rows(t0, t1), v.view().slice_rows(t0, t1),
                           a.view().slice_rows(t0, t1), b.view().slice_rows(t0, t1), a_log, dt_bias, state_inout,
                           params);
    return out;
  }
};

double max_abs_diff(const Tensor& x, const Tensor& y) {
  EXPECT_EQ(x.numel(), y.numel());
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) m = std::max(m, std::fabs(double(x.ptr<float>()[i]) - y.ptr<float>()[i]));
  return m;
}

bool bitwise_equal(const Tensor& x, const Tensor& y) {
  return x.nbytes() == y.nbytes() && std::equal(x.ptr<char>(), x.ptr<char>() + x.nbytes(), y.ptr<char>());
}

// B.7-B.9 in f64, token by token, for one sequence's rows [t0, t1) starting from `state` (slot's S).
std::vector<double> reference_delta_rule(const DeltaCase& c, size_t seq, std::vector<double>& S /* [Hv, dk, dv] */) {
  const int64_t t0 = c.cu[seq], t1 = c.cu[seq + 1];
  std::vector<double> out(static_cast<size_t>((t1 - t0) * kHv * kDv));
  auto at = [](const Tensor& t, int64_t i) { return static_cast<double>(t.ptr<float>()[i]); };
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t h = 0; h < kHv; ++h) {
      const int64_t kh = h / (kHv / kHk);
      std::vector<double> q(kDk), k(kDk);
      double qn = 0, kn = 0;
      for (int64_t d = 0; d < kDk; ++d) {
        q[d] = at(c.q, (t * kHk + kh) * kDk + d);
        k[d] = at(c.k, (t * kHk + kh) * kDk + d);
        qn += q[d] * q[d];
        kn += k[d] * k[d];
      }
      for (int64_t d = 0; d < kDk; ++d) {
        q[d] = q[d] / std::sqrt(qn + 1e-6) / std::sqrt(double(kDk));
        k[d] = k[d] / std::sqrt(kn + 1e-6);
      }
      const double x = at(c.a, t * kHv + h) + at(c.dt_bias, h);
      const double g = -std::exp(at(c.a_log, h)) * (x > 20 ? x : std::log1p(std::exp(x)));
      const double beta = 1.0 / (1.0 + std::exp(-at(c.b, t * kHv + h)));
      double* s = S.data() + h * kDk * kDv;
      for (int64_t e = 0; e < kDk * kDv; ++e) s[e] *= std::exp(g);
      for (int64_t j = 0; j < kDv; ++j) {
        double m = 0;
        for (int64_t r = 0; r < kDk; ++r) m += s[r * kDv + j] * k[r];
        const double delta = beta * (at(c.v, (t * kHv + h) * kDv + j) - m);
        for (int64_t r = 0; r < kDk; ++r) s[r * kDv + j] += k[r] * delta;
      }
      for (int64_t j = 0; j < kDv; ++j) {
        double o = 0;
        for (int64_t r = 0; r < kDk; ++r) o += s[r * kDv + j] * q[r];
        out[static_cast<size_t>(((t - t0) * kHv + h) * kDv + j)] = o;
      }
    }
  }
  return out;
}

TEST(GdnDeltaRule, ChunkedEqualsRecurrentAndTheF64Reference) {
  const DeltaCase c({1, 5, 64, 130, 63}, {3, 0, 2, 1, 4}, 1);
  Tensor state_recurrent = copy_of(c.state), state_chunked = copy_of(c.state);
  const Tensor out_recurrent = c.run(state_recurrent, GdnAlgo::kRecurrent);
  const Tensor out_chunked = c.run(state_chunked, GdnAlgo::kChunked);
  EXPECT_LT(max_abs_diff(out_recurrent, out_chunked), 2e-5);
  EXPECT_LT(max_abs_diff(state_recurrent, state_chunked), 2e-5);
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    std::vector<double> S(static_cast<size_t>(kHv * kDk * kDv));
    const float* initial = c.state.ptr<float>() + c.slots[s] * kHv * kDk * kDv;
    std::copy(initial, initial + S.size(), S.begin());
    const std::vector<double> want = reference_delta_rule(c, s, S);
    double err = 0.0, state_err = 0.0;
    for (size_t i = 0; i < want.size(); ++i)
      err = std::max(err, std::fabs(want[i] - out_chunked.ptr<float>()[c.cu[s] * kHv * kDv + static_cast<int64_t>(i)]));
    const float* final_state = state_chunked.ptr<float>() + c.slots[s] * kHv * kDk * kDv;
    for (size_t i = 0; i < S.size(); ++i) state_err = std::max(state_err, std::fabs(S[i] - final_state[i]));
    EXPECT_LT(err, 2e-5);
    EXPECT_LT(state_err, 2e-5);
  }
}

TEST(GdnDeltaRule, VarlenBatchEqualsSequencesAlone) {
  const DeltaCase c({7, 1, 70, 1, 33}, {4, 1, 0, 3, 2}, 2);
  Tensor state_batch = copy_of(c.state), state_alone = copy_of(c.state);
  const Tensor out_batch = c.run(state_batch, GdnAlgo::kAuto);
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const Tensor out = c.run(state_alone, GdnAlgo::kAuto, s, s + 1);
    const Tensor batch_rows = Tensor(out_batch.view().slice_rows(c.cu[s], c.cu[s + 1]), nullptr);
    EXPECT_TRUE(bitwise_equal(copy_of(batch_rows), out)) << "sequence " << s;
  }
  EXPECT_TRUE(bitwise_equal(state_batch, state_alone));
}

TEST(GdnDeltaRule, ChunkedPrefillOverSeveralCallsCarriesTheState) {
  // One 150-token sequence in slot 2, split like the scheduler's chunked prefill: 1, 7, 64, 78.
  const DeltaCase whole({150}, {2}, 3);
  const DeltaCase split({1, 7, 64, 78}, {2, 2, 2, 2}, 3);  // same seed: the same token rows
  Tensor state_whole = copy_of(whole.state), state_split = copy_of(split.state);
  const Tensor out_whole = whole.run(state_whole, GdnAlgo::kAuto);
  std::vector<Tensor> parts;
  for (size_t s = 0; s < split.lengths.size(); ++s) parts.push_back(split.run(state_split, GdnAlgo::kAuto, s, s + 1));
  Tensor out_split = Tensor::cpu(out_whole.shape(), DType::kF32);
  int64_t at = 0;
  for (const Tensor& part : parts) {
    std::copy(part.ptr<float>(), part.ptr<float>() + part.numel(), out_split.ptr<float>() + at);
    at += part.numel();
  }
  EXPECT_LT(max_abs_diff(out_whole, out_split), 2e-5);
  EXPECT_LT(max_abs_diff(state_whole, state_split), 2e-5);
}

// One slot of a state tensor [slots, ...] as a tensor of its own.
Tensor slot_of(const Tensor& state, int64_t slot) { return copy_of(Tensor(state.view().slice_rows(slot, slot + 1), nullptr)); }

// Prefix-cache checkpoints: the state after tokens 64 and 128 of a 150-token sequence lands in
// slots 3 and 4, bitwise the state the 64- and 128-token prefixes leave alone (in both forms).
TEST(GdnDeltaRule, CheckpointsEqualThePrefixComputedAlone) {
  for (GdnAlgo algo : {GdnAlgo::kAuto, GdnAlgo::kRecurrent}) {
    const DeltaCase whole({150}, {0}, 3);
    Tensor state = copy_of(whole.state);
    std::vector<int32_t> targets(150, -1);
    targets[63] = 3;
    targets[127] = 4;
    whole.run(state, algo, 0, 1, targets);
    for (const auto [prefix, slot] : {std::pair{64, 3}, std::pair{128, 4}}) {
      const DeltaCase split({prefix, 150 - prefix}, {0, 1}, 3);  // same seed: the same token rows
      Tensor alone = copy_of(split.state);
      split.run(alone, algo, 0, 1);
      EXPECT_TRUE(bitwise_equal(slot_of(alone, 0), slot_of(state, slot))) << "after " << prefix << " tokens";
    }
  }
}

TEST(GdnConv1d, CheckpointsEqualThePrefixComputedAlone) {
  std::mt19937 rng(6);
  const int64_t t = 100;
  const Tensor x = random_tensor({t, kConvDim}, rng, 1.0f);
  const Tensor w = random_tensor({kConvDim, kKernel}, rng, 0.5f);
  const Tensor state0 = random_tensor({kSlots, kConvDim, kKernel - 1}, rng, 1.0f);
  CpuBackend backend;
  auto run = [&](Tensor& state, int64_t length, const std::vector<int32_t>& checkpoints) {
    Tensor cu = i32_tensor({0, static_cast<int32_t>(length)}), slots = i32_tensor({1});
    const Tensor targets = checkpoints.empty() ? Tensor() : i32_tensor(checkpoints);
    Tensor out = Tensor::cpu({length, kConvDim}, DType::kF32);
    backend.gdn_conv1d(out, x.view().slice_rows(0, length), w, state,
                       GdnParams{cu.view(), slots.view(), 0, GdnAlgo::kAuto, targets.view()});
  };
  std::vector<int32_t> targets(static_cast<size_t>(t), -1);
  targets[1] = 2;  // after 2 tokens: one input of the old state is still in the window
  targets[63] = 3;
  Tensor state = copy_of(state0);
  run(state, t, targets);
  for (const auto [prefix, slot] : {std::pair{2, 2}, std::pair{64, 3}}) {
    Tensor alone = copy_of(state0);
    run(alone, prefix, {});
    EXPECT_TRUE(bitwise_equal(slot_of(alone, 1), slot_of(state, slot))) << "after " << prefix << " tokens";
  }
}

TEST(GdnConv1d, SplitCallsEqualOneCallAndTheDefinition) {
  std::mt19937 rng(4);
  const int64_t t = 40;
  const Tensor x = random_tensor({t, kConvDim}, rng, 1.0f);
  const Tensor w = random_tensor({kConvDim, kKernel}, rng, 0.5f);
  const Tensor state0 = random_tensor({kSlots, kConvDim, kKernel - 1}, rng, 1.0f);
  CpuBackend backend;
  auto run = [&](Tensor& state, int64_t t0, int64_t t1, int32_t slot) {
    Tensor cu = i32_tensor({0, static_cast<int32_t>(t1 - t0)}), slots = i32_tensor({slot});
    Tensor out = Tensor::cpu({t1 - t0, kConvDim}, DType::kF32);
    backend.gdn_conv1d(out, x.view().slice_rows(t0, t1), w, state, GdnParams{cu.view(), slots.view(), 0, GdnAlgo::kAuto});
    return out;
  };
  Tensor state_whole = copy_of(state0), state_split = copy_of(state0);
  const Tensor whole = run(state_whole, 0, t, 1);
  const int64_t cuts[] = {0, 1, 2, 9, 40};
  for (int i = 0; i + 1 < 5; ++i) {
    const Tensor part = run(state_split, cuts[i], cuts[i + 1], 1);
    EXPECT_TRUE(bitwise_equal(part, copy_of(Tensor(whole.view().slice_rows(cuts[i], cuts[i + 1]), nullptr))));
  }
  EXPECT_TRUE(bitwise_equal(state_whole, state_split));
  // The definition: u = [state | x], y = silu(sum_j w[c, j] u[t + j]); the state keeps u's last K-1.
  for (int64_t c : {0L, 17L, kConvDim - 1}) {
    for (int64_t i : {0L, 2L, t - 1}) {
      double acc = 0.0;
      for (int64_t j = 0; j < kKernel; ++j) {
        const int64_t p = i - (kKernel - 1) + j;
        const double u = p >= 0 ? x.ptr<float>()[p * kConvDim + c]
                                : state0.ptr<float>()[(1 * kConvDim + c) * (kKernel - 1) + (kKernel - 1) + p];
        acc += w.ptr<float>()[c * kKernel + j] * u;
      }
      EXPECT_NEAR(whole.ptr<float>()[i * kConvDim + c], acc / (1.0 + std::exp(-acc)), 1e-5);
    }
    EXPECT_EQ(state_whole.ptr<float>()[(1 * kConvDim + c) * (kKernel - 1) + kKernel - 2], x.ptr<float>()[(t - 1) * kConvDim + c]);
  }
  // Other slots are untouched.
  EXPECT_EQ(std::vector<float>(state_whole.ptr<float>(), state_whole.ptr<float>() + kConvDim * (kKernel - 1)),
            std::vector<float>(state0.ptr<float>(), state0.ptr<float>() + kConvDim * (kKernel - 1)));
}

}  // namespace
}  // namespace pagellm
