// The CUDA hybrid-model ops (backend/cuda/gdn.cu) against their CPU twins on random data: gdn_conv1d
// and gdn_delta_rule over varlen batches of new (zeroed slot) and continuing sequences, Hv/Hk of 1
// and 2 (and 3), dk = dv in {16, 128} (and 48/40, off the warp width), K = 4, strided inputs as the
// model passes them; the delta rule's chunked kernel against the CPU's chunked and recurrent forms
// around the chunk size (1 ... 513 tokens, Qwen3.5 head counts), its routing by length (form, env,
// hint), and a prompt fed over several calls; gated_rms_norm, sigmoid_mul (full-width and per-row
// gates), add_rows_scaled (a row named twice). f32 near-exact, bf16 within a few ulps. Outputs are
// poisoned (NaN) before each GPU run. Skips, with the reason, where there is no GPU or no CUDA build.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"

namespace pagellm::cuda_test {
namespace {

using attention_test::fill_nan;

const DType kFloatTypes[] = {DType::kF32, DType::kBF16};

Tensor poisoned(Backend& gpu, Shape shape, DType dtype) {
  Tensor host = Tensor::cpu(shape, dtype);
  fill_nan(host);
  return to_device(gpu, host.view());
}

Tensor i32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(values.size())}, DType::kI32);
  std::copy(values.begin(), values.end(), t.ptr<int32_t>());
  return t;
}

Tensor f32_tensor(const std::vector<float>& values) {
  Tensor t = Tensor::cpu({static_cast<int64_t>(values.size())}, DType::kF32);
  std::copy(values.begin(), values.end(), t.ptr<float>());
  return t;
}

// Columns [first, first + heads * dim) of a row-major [T, width] buffer as [T, heads, dim].
TensorView heads_of(const TensorView& buffer, int64_t first, int64_t heads, int64_t dim, int64_t head_stride = 0) {
  TensorView v = buffer;
  v.data = static_cast<char*>(buffer.data) + static_cast<size_t>(first) * dtype_size_bytes(buffer.dtype);
  v.shape = Shape{buffer.size(0), heads, dim};
  v.strides = {buffer.strides[0], head_stride > 0 ? head_stride : dim, 1, 0};
  return v;
}

// Columns [first, first + n) of a row-major [T, width] buffer as [T, n].
TensorView columns_of(const TensorView& buffer, int64_t first, int64_t n) {
  TensorView v = buffer;
  v.data = static_cast<char*>(buffer.data) + static_cast<size_t>(first) * dtype_size_bytes(buffer.dtype);
  v.shape = Shape{buffer.size(0), n};
  v.strides = {buffer.strides[0], 1, 0, 0};
  return v;
}

// A varlen batch: sequences of `lengths` tokens in `slots` of num_slots; the new ones start from a
// zeroed slot, the others continue from random state.
struct Batch {
  std::vector<int32_t> lengths, slots, cu;
  std::vector<bool> is_new;
  int64_t num_slots = 8;
  Batch(std::vector<int32_t> lens, std::vector<int32_t> slot_ids, std::vector<bool> fresh)
      : lengths(std::move(lens)), slots(std::move(slot_ids)), is_new(std::move(fresh)) {
    cu.push_back(0);
    for (int32_t n : lengths) cu.push_back(cu.back() + n);
  }
  int64_t num_tokens() const { return cu.back(); }
  // A state tensor [num_slots, per_slot...] of random values, zeroed in the new sequences' slots.
  Tensor state(Shape shape, DType dtype, Rng& rng, float scale) const {
    Tensor t = random_tensor(shape, dtype, rng, -scale, scale);
    const int64_t per_slot = t.numel() / shape[0];
    for (size_t s = 0; s < slots.size(); ++s)
      if (is_new[s])
        std::memset(t.ptr<char>() + static_cast<size_t>(slots[s] * per_slot) * dtype_size_bytes(dtype), 0,
                    static_cast<size_t>(per_slot) * dtype_size_bytes(dtype));
    return t;
  }
};

const Batch& mixed_batch() {  // prefill, decode, a 0-token row, a chunk longer than 64
  static const Batch b({1, 5, 1, 70, 0, 3, 17}, {3, 0, 6, 1, 7, 4, 2}, {false, true, false, true, false, false, true});
  return b;
}
const Batch& decode_batch() {
  static const Batch b({1, 1, 1, 1, 1}, {5, 0, 2, 7, 3}, {false, true, false, false, true});
  return b;
}
// As many rows as sequences, not one each: gdn_conv1d's one-kernel form (a thread walks its rows).
const Batch& uneven_rows_batch() {
  static const Batch b({2, 0, 1, 3, 0, 1, 0}, {5, 0, 2, 7, 3, 1, 6}, {false, true, false, true, false, false, false});
  return b;
}

struct GpuParams {
  Tensor cu, slots;
  GdnParams params;
  GpuParams(Backend& gpu, const Batch& b) {
    cu = to_device(gpu, i32_tensor(b.cu).view());
    slots = to_device(gpu, i32_tensor(b.slots).view());
    params.cu_seqlens_q = cu.view();
    params.state_slots = slots.view();
  }
};

GdnParams cpu_params(const Tensor& cu, const Tensor& slots) { return GdnParams{cu.view(), slots.view(), 0, GdnAlgo::kAuto}; }

// ----- gdn_conv1d ---------------------------------------------------------------------------------

TEST(CudaGdn, Conv1dMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  constexpr int64_t kKernel = 4;
  for (const Batch* batch : {&mixed_batch(), &decode_batch(), &uneven_rows_batch()}) {
    for (DType dtype : kFloatTypes) {
      for (int64_t channels : {int64_t{96}, int64_t{2 * 2 * 128 + 4 * 128}, int64_t{300}}) {
        SCOPED_TRACE(fmt::format("{} channels {} tokens {}", dtype_name(dtype), channels, batch->num_tokens()));
        Rng rng(static_cast<uint64_t>(channels) * 31 + batch->num_tokens());
        const int64_t t = batch->num_tokens(), width = channels + 24;
        const Tensor in_proj = random_tensor({t, width}, dtype, rng, -2.0f, 2.0f);  // x = columns [8, 8 + C)
        const Tensor weight = random_tensor({channels, kKernel}, dtype, rng, -0.6f, 0.6f);
        const Tensor state0 = batch->state({batch->num_slots, channels, kKernel - 1}, dtype, rng, 2.0f);
        const Tensor cu = i32_tensor(batch->cu), slots = i32_tensor(batch->slots);

        Tensor want_out = Tensor::cpu({t, channels}, dtype);
        Tensor want_state = converted(state0, dtype);
        cpu.gdn_conv1d(want_out.view(), columns_of(in_proj.view(), 8, channels), weight.view(), want_state.view(),
                       cpu_params(cu, slots));

        GpuParams p(*gpu, *batch);
        Tensor d_in = to_device(*gpu, in_proj.view()), d_weight = to_device(*gpu, weight.view());
        Tensor d_state = to_device(*gpu, state0.view());
        Tensor d_out = poisoned(*gpu, {t, channels}, dtype);
        gpu->gdn_conv1d(d_out.view(), columns_of(d_in.view(), 8, channels), d_weight.view(), d_state.view(), p.params);
        const Tol tol = dtype == DType::kF32 ? ulps(dtype, 4, 1e-6) : ulps(dtype, 2, 1e-3);
        EXPECT_EQ(compare_tensors(want_out, to_host(*gpu, d_out.view()), tol.rel, tol.abs), "") << "out";
        EXPECT_EQ(compare_tensors(want_state, to_host(*gpu, d_state.view()), 0, 0), "") << "conv_state";
      }
    }
  }
}

// A batch of as many rows as sequences runs gdn_conv1d in one kernel, any other in two: the same
// rows give the same bits either way (a decode step's outputs and states are those of the prompt
// path). The one-kernel batch is the two-kernel batch without its last sequence (2 rows).
TEST(CudaGdn, Conv1dOneKernelFormEqualsTheTwoKernelForm) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const Batch& rows = uneven_rows_batch();
  std::vector<int32_t> lengths = rows.lengths, slot_ids = rows.slots;
  std::vector<bool> fresh = rows.is_new;
  lengths.push_back(2);
  slot_ids.push_back(4);
  fresh.push_back(false);
  const Batch two(lengths, slot_ids, fresh);
  // The first n rows (or slot n's [per_slot] elements) of a host tensor, as a tensor of their own.
  auto part = [](const Tensor& t, int64_t first, int64_t count, int64_t per_row) {
    Tensor out = Tensor::cpu({count, per_row}, t.dtype());
    const size_t row_bytes = static_cast<size_t>(per_row) * dtype_size_bytes(t.dtype());
    std::memcpy(out.ptr<char>(), t.ptr<char>() + static_cast<size_t>(first) * row_bytes,
                static_cast<size_t>(count) * row_bytes);
    return out;
  };
  const int64_t channels = 300;
  for (DType dtype : kFloatTypes) {
    for (int64_t kernel : {2, 4, 8}) {  // 8: the CUDA kernels' largest (kMaxGdnConvKernel)
      SCOPED_TRACE(fmt::format("{} kernel {}", dtype_name(dtype), kernel));
      Rng rng(static_cast<uint64_t>(kernel) * 7 + 3);
      const Tensor x = random_tensor({two.num_tokens(), channels}, dtype, rng, -2.0f, 2.0f);
      const Tensor weight = random_tensor({channels, kernel}, dtype, rng, -0.6f, 0.6f);
      const Tensor state0 = two.state({two.num_slots, channels, kernel - 1}, dtype, rng, 2.0f);
      const Tensor d_weight = to_device(*gpu, weight.view());
      // Out and state after gdn_conv1d of batch b over the first rows of x.
      auto run = [&](const Batch& b) {
        GpuParams p(*gpu, b);
        const Tensor d_x = to_device(*gpu, part(x, 0, b.num_tokens(), channels).view());
        Tensor d_state = to_device(*gpu, state0.view()), d_out = poisoned(*gpu, {b.num_tokens(), channels}, dtype);
        gpu->gdn_conv1d(d_out.view(), d_x.view(), d_weight.view(), d_state.view(), p.params);
        return std::make_pair(to_host(*gpu, d_out.view()), to_host(*gpu, d_state.view()));
      };
      const auto [out_one, state_one] = run(rows);
      const auto [out_two, state_two] = run(two);
      EXPECT_EQ(compare_tensors(out_one, part(out_two, 0, rows.num_tokens(), channels), 0, 0), "") << "outputs";
      const int64_t per_slot = channels * (kernel - 1);
      for (int32_t slot : rows.slots)  // all but the extra sequence's slot (4)
        EXPECT_EQ(compare_tensors(part(state_one, slot, 1, per_slot), part(state_two, slot, 1, per_slot), 0, 0), "")
            << "slot " << slot;
    }
  }
}

// ----- gdn_delta_rule -----------------------------------------------------------------------------

struct DeltaShape {
  int64_t hk, hv, dk, dv;
};

TEST(CudaGdn, DeltaRuleMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  const DeltaShape shapes[] = {{2, 2, 16, 16}, {2, 4, 16, 16}, {2, 2, 128, 128}, {2, 4, 128, 128}, {1, 3, 48, 40}};
  for (const Batch* batch : {&mixed_batch(), &decode_batch()}) {
    for (const DeltaShape& s : shapes) {
      for (DType dtype : kFloatTypes) {
        SCOPED_TRACE(fmt::format("{} Hk {} Hv {} dk {} dv {} tokens {}", dtype_name(dtype), s.hk, s.hv, s.dk, s.dv,
                                 batch->num_tokens()));
        Rng rng(static_cast<uint64_t>(s.hk * 1000 + s.hv * 100 + s.dk + batch->num_tokens()));
        const int64_t t = batch->num_tokens(), key_dim = s.hk * s.dk, value_dim = s.hv * s.dv;
        // The model's layout: conv output [T, q | k | v], in_proj [T, ... | b | a].
        const Tensor conv = random_tensor({t, 2 * key_dim + value_dim}, dtype, rng, -1.0f, 1.0f);
        const Tensor ab = random_tensor({t, 8 + 2 * s.hv}, dtype, rng, -2.5f, 2.5f);
        std::vector<float> a_log, dt_bias;
        for (int64_t h = 0; h < s.hv; ++h) {
          a_log.push_back(rng.uniform(-0.5f, 1.5f));
          dt_bias.push_back(rng.uniform(0.0f, 2.0f));
        }
        const Tensor a_log_t = f32_tensor(a_log), dt_bias_t = f32_tensor(dt_bias);
        const Tensor state0 = batch->state({batch->num_slots, s.hv, s.dk, s.dv}, DType::kF32, rng, 0.3f);
        const Tensor cu = i32_tensor(batch->cu), slots = i32_tensor(batch->slots);
        auto run = [&](Backend& backend, const TensorView& conv_v, const TensorView& ab_v, const TensorView& alog_v,
                       const TensorView& dtb_v, TensorView state, TensorView out, const GdnParams& params) {
          backend.gdn_delta_rule(out, heads_of(conv_v, 0, s.hk, s.dk), heads_of(conv_v, key_dim, s.hk, s.dk),
                                 heads_of(conv_v, 2 * key_dim, s.hv, s.dv), columns_of(ab_v, 8 + s.hv, s.hv),
                                 columns_of(ab_v, 8, s.hv), alog_v, dtb_v, state, params);
        };
        Tensor want_out = Tensor::cpu({t, s.hv, s.dv}, dtype);
        Tensor want_state = converted(state0, DType::kF32);
        run(cpu, conv.view(), ab.view(), a_log_t.view(), dt_bias_t.view(), want_state.view(), want_out.view(),
            cpu_params(cu, slots));

        GpuParams p(*gpu, *batch);
        Tensor d_conv = to_device(*gpu, conv.view()), d_ab = to_device(*gpu, ab.view());
        Tensor d_alog = to_device(*gpu, a_log_t.view()), d_dtb = to_device(*gpu, dt_bias_t.view());
        Tensor d_state = to_device(*gpu, state0.view());
        Tensor d_out = poisoned(*gpu, {t, s.hv, s.dv}, dtype);
        run(*gpu, d_conv.view(), d_ab.view(), d_alog.view(), d_dtb.view(), d_state.view(), d_out.view(), p.params);
        const Tol tol = dtype == DType::kF32 ? Tol{1e-4, 2e-5} : ulps(dtype, 2, 1e-4);
        EXPECT_EQ(compare_tensors(want_out, to_host(*gpu, d_out.view()), tol.rel, tol.abs), "") << "out";
        EXPECT_EQ(compare_tensors(want_state, to_host(*gpu, d_state.view()), 1e-4, 2e-5), "") << "state";
      }
    }
  }
}

// ----- gdn_delta_rule: the chunked kernel and the routing between the two kernels ---------------

// Random inputs of gdn_delta_rule for a batch in the model's layout (conv output [T, q | k | v],
// in_proj [T, ... | b | a]); run() gives out [T, Hv, dv] and the state [num_slots, Hv, dk, dv] f32
// one backend computes from them (inputs copied to its device, its output poisoned first).
struct DeltaInputs {
  DeltaShape s;
  DType dtype;
  Batch batch;
  Tensor conv, ab, a_log, dt_bias, state0;

  DeltaInputs(const DeltaShape& shape, DType dt, Batch b, uint64_t seed) : s(shape), dtype(dt), batch(std::move(b)) {
    Rng rng(seed);
    const int64_t t = batch.num_tokens(), key_dim = s.hk * s.dk, value_dim = s.hv * s.dv;
    conv = random_tensor({t, 2 * key_dim + value_dim}, dtype, rng, -1.0f, 1.0f);
    ab = random_tensor({t, 8 + 2 * s.hv}, dtype, rng, -2.5f, 2.5f);
    std::vector<float> alog, dtb;
    for (int64_t h = 0; h < s.hv; ++h) {
      alog.push_back(rng.uniform(-0.5f, 1.5f));
      dtb.push_back(rng.uniform(0.0f, 2.0f));
    }
    a_log = f32_tensor(alog);
    dt_bias = f32_tensor(dtb);
    state0 = batch.state({batch.num_slots, s.hv, s.dk, s.dv}, DType::kF32, rng, 0.3f);
  }

  // checkpoints: GdnParams::checkpoint_slots [T], or empty.
  std::pair<Tensor, Tensor> run(Backend& backend, GdnAlgo algo, int32_t max_seqlen_q = 0,
                                const std::vector<int32_t>& checkpoints = {}) const {
    const int64_t t = batch.num_tokens(), key_dim = s.hk * s.dk;
    const Tensor cu = to_device(backend, i32_tensor(batch.cu).view());
    const Tensor slots = to_device(backend, i32_tensor(batch.slots).view());
    const Tensor d_conv = to_device(backend, conv.view()), d_ab = to_device(backend, ab.view());
    const Tensor d_alog = to_device(backend, a_log.view()), d_dtb = to_device(backend, dt_bias.view());
    Tensor d_state = to_device(backend, state0.view());
    Tensor d_out = poisoned(backend, {t, s.hv, s.dv}, dtype);
    const Tensor d_checkpoints = checkpoints.empty() ? Tensor() : to_device(backend, i32_tensor(checkpoints).view());
    // Rows of this batch only (a prefix batch reads the first tokens of the full batch's inputs).
    const TensorView cv = d_conv.view().slice_rows(0, t), abv = d_ab.view().slice_rows(0, t);
    backend.gdn_delta_rule(d_out.view(), heads_of(cv, 0, s.hk, s.dk), heads_of(cv, key_dim, s.hk, s.dk),
                           heads_of(cv, 2 * key_dim, s.hv, s.dv), columns_of(abv, 8 + s.hv, s.hv),
                           columns_of(abv, 8, s.hv), d_alog.view(), d_dtb.view(), d_state.view(),
                           GdnParams{cu.view(), slots.view(), max_seqlen_q, algo, d_checkpoints.view()});
    return {to_host(backend, d_out.view()), to_host(backend, d_state.view())};
  }
};

// Lengths around the chunk size (C = 64) in one varlen batch, new and continuing sequences, decode
// rows first, between and last.
const Batch& chunk_grid_batch() {
  static const Batch b = [] {
    Batch batch({1, 7, 63, 64, 1, 65, 200, 513, 1}, {3, 0, 6, 1, 8, 7, 4, 2, 5},
                {false, true, false, true, false, false, false, true, false});
    batch.num_slots = 10;  // slot 9 unused: a neighbour no sequence may write
    return batch;
  }();
  return b;
}

// The rows of `t` (outer dim) of the given sequences' tokens (`by_slot`: of their slots instead),
// in batch order, so outputs of one route can be compared alone.
Tensor rows_of_seqs(const Tensor& t, const Batch& b, const std::vector<size_t>& seqs, bool by_slot) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t s : seqs) {
    if (by_slot) ranges.emplace_back(b.slots[s], b.slots[s] + 1);
    else ranges.emplace_back(b.cu[s], b.cu[s + 1]);
  }
  int64_t rows = 0;
  for (const auto& [begin, end] : ranges) rows += end - begin;
  const int64_t row_bytes = t.nbytes() / t.shape()[0];
  Tensor out = Tensor::cpu({rows, row_bytes / static_cast<int64_t>(dtype_size_bytes(t.dtype()))}, t.dtype());
  char* dst = out.ptr<char>();
  for (const auto& [begin, end] : ranges) {
    std::memcpy(dst, t.ptr<char>() + begin * row_bytes, static_cast<size_t>((end - begin) * row_bytes));
    dst += (end - begin) * row_bytes;
  }
  return out;
}

// GdnAlgo::kChunked sends every sequence (decode rows too) through the chunked kernel; it must
// match the CPU's chunked form (same chunk boundaries) and its recurrent form, out and state.
TEST(CudaGdn, ChunkedDeltaRuleMatchesCpuChunkedAndRecurrent) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  // Qwen3.5-0.8B's GDN (16 key heads, 16 value heads of 128), the larger Qwen3.5 shape (16 / 32),
  // small heads, dk and dv off the warp width, dv spanning 3 column tiles.
  const DeltaShape shapes[] = {{16, 16, 128, 128}, {16, 32, 128, 128}, {2, 4, 16, 16}, {1, 3, 48, 40}, {2, 2, 64, 72}};
  for (const DeltaShape& s : shapes) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} Hk {} Hv {} dk {} dv {}", dtype_name(dtype), s.hk, s.hv, s.dk, s.dv));
      const DeltaInputs in(s, dtype, chunk_grid_batch(), static_cast<uint64_t>(s.hk * 1000 + s.hv * 100 + s.dk + s.dv));
      const auto cpu_chunked = in.run(cpu, GdnAlgo::kChunked);
      const auto cpu_recurrent = in.run(cpu, GdnAlgo::kRecurrent);
      const auto got = in.run(*gpu, GdnAlgo::kChunked);
      const Tol tol = dtype == DType::kF32 ? Tol{1e-4, 2e-5} : ulps(dtype, 2, 1e-4);
      EXPECT_EQ(compare_tensors(cpu_chunked.first, got.first, tol.rel, tol.abs), "") << "out vs CPU chunked";
      EXPECT_EQ(compare_tensors(cpu_chunked.second, got.second, 1e-4, 2e-5), "") << "state vs CPU chunked";
      EXPECT_EQ(compare_tensors(cpu_recurrent.first, got.first, tol.rel, 2 * tol.abs), "") << "out vs CPU recurrent";
      EXPECT_EQ(compare_tensors(cpu_recurrent.second, got.second, 1e-4, 4e-5), "") << "state vs CPU recurrent";
    }
  }
}

// One slot's rows of a state tensor [num_slots, ...].
Tensor slot_of(const Tensor& state, int64_t slot) { return rows_of_seqs(state, Batch({1}, {static_cast<int32_t>(slot)}, {false}), {0}, true); }

// Prefix-cache checkpoints (GdnParams::checkpoint_slots): the state after tokens 64 and 128 of a
// 200-token sequence, and after token 64 of a 70-token one behind it, lands in its checkpoint slot,
// bitwise the state a run of that prefix alone leaves (same chunks), in the chunked and the
// recurrent kernel; and within the CPU comparison's tolerance of the CPU's checkpoints.
TEST(CudaGdn, DeltaRuleCheckpointsHoldTheStateAfterTheirToken) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  const Batch full({200, 1, 70}, {0, 1, 2}, {true, false, true});
  std::vector<int32_t> targets(static_cast<size_t>(full.num_tokens()), -1);
  targets[63] = 5;
  targets[127] = 6;
  targets[static_cast<size_t>(full.cu[2]) + 63] = 7;
  const std::pair<int64_t, Batch> prefixes[] = {{5, Batch({64}, {0}, {true})},
                                                {6, Batch({128}, {0}, {true})},
                                                {7, Batch({201, 64}, {3, 2}, {false, true})}};
  const int64_t prefix_slot[] = {0, 0, 2};
  for (GdnAlgo algo : {GdnAlgo::kChunked, GdnAlgo::kRecurrent}) {
    for (DType dtype : kFloatTypes) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), algo == GdnAlgo::kChunked ? "chunked" : "recurrent"));
      const DeltaInputs in({16, 16, 128, 128}, dtype, full, 77);
      const auto got = in.run(*gpu, algo, 0, targets);
      const auto cpu_got = in.run(cpu, algo, 0, targets);
      for (size_t i = 0; i < std::size(prefixes); ++i) {
        DeltaInputs alone = in;
        alone.batch = prefixes[i].second;
        const auto want = alone.run(*gpu, algo);
        EXPECT_EQ(compare_tensors(slot_of(want.second, prefix_slot[i]), slot_of(got.second, prefixes[i].first), 0, 0), "")
            << "checkpoint slot " << prefixes[i].first;
        EXPECT_EQ(compare_tensors(slot_of(cpu_got.second, prefixes[i].first), slot_of(got.second, prefixes[i].first), 1e-4, 2e-5), "")
            << "checkpoint slot " << prefixes[i].first << " vs CPU";
      }
    }
  }
}

// gdn_conv1d's checkpoints: the last K-1 inputs after the token, as a run of the prefix leaves them.
TEST(CudaGdn, Conv1dCheckpointsHoldTheInputsBeforeTheirPosition) {
  PAGELLM_GPU_OR_SKIP(gpu);
  constexpr int64_t kKernel = 4, kChannels = 300;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Rng rng(5);
    const Batch full({130, 70}, {0, 1}, {true, true});
    const Tensor x = random_tensor({full.num_tokens(), kChannels}, dtype, rng, -2.0f, 2.0f);
    const Tensor weight = random_tensor({kChannels, kKernel}, dtype, rng, -0.6f, 0.6f);
    std::vector<int32_t> targets(static_cast<size_t>(full.num_tokens()), -1);
    targets[63] = 4;
    targets[static_cast<size_t>(full.cu[1]) + 63] = 5;
    auto run = [&](const Batch& batch, const std::vector<int32_t>& checkpoints) {
      GpuParams p(*gpu, batch);
      const Tensor d_targets = checkpoints.empty() ? Tensor() : to_device(*gpu, i32_tensor(checkpoints).view());
      p.params.checkpoint_slots = d_targets.view();
      Tensor d_x = to_device(*gpu, x.view()), d_weight = to_device(*gpu, weight.view());
      Tensor zeros = Tensor::cpu({8, kChannels, kKernel - 1}, dtype);
      std::memset(zeros.ptr<char>(), 0, static_cast<size_t>(zeros.nbytes()));
      Tensor d_state = to_device(*gpu, zeros.view());
      Tensor d_out = poisoned(*gpu, {full.num_tokens(), kChannels}, dtype);
      gpu->gdn_conv1d(d_out.view(), d_x.view(), d_weight.view(), d_state.view(), p.params);
      return to_host(*gpu, d_state.view());
    };
    const Tensor got = run(full, targets);
    EXPECT_EQ(compare_tensors(slot_of(run(Batch({64}, {0}, {true}), {}), 0), slot_of(got, 4), 0, 0), "");
    EXPECT_EQ(compare_tensors(slot_of(run(Batch({130, 64}, {3, 1}, {true, true}), {}), 1), slot_of(got, 5), 0, 0), "");
  }
}

// kAuto: sequences of >= 16 tokens take the chunked kernel, shorter ones the recurrent kernel, so
// each sequence's rows and slot equal (bitwise) those of the forced form; the env switches and the
// max_seqlen_q hint move the line, and a hint that is too small still computes every row; shapes
// outside the chunked kernel (dk > 128, dk % 8 != 0) stay recurrent whatever the form.
TEST(CudaGdn, DeltaRuleRoutesSequencesByLength) {
  PAGELLM_GPU_OR_SKIP(gpu);
  constexpr int64_t kChunkedMinTokens = 16;
  const Batch& batch = chunk_grid_batch();
  std::vector<size_t> short_seqs, long_seqs;
  for (size_t s = 0; s < batch.lengths.size(); ++s)
    (batch.lengths[s] >= kChunkedMinTokens ? long_seqs : short_seqs).push_back(s);
  auto expect_same = [&](const std::pair<Tensor, Tensor>& want, const std::pair<Tensor, Tensor>& got,
                         const std::vector<size_t>& seqs, const char* what) {
    EXPECT_EQ(compare_tensors(rows_of_seqs(want.first, batch, seqs, false), rows_of_seqs(got.first, batch, seqs, false),
                              0, 0), "") << what << ": out";
    EXPECT_EQ(compare_tensors(rows_of_seqs(want.second, batch, seqs, true), rows_of_seqs(got.second, batch, seqs, true),
                              0, 0), "") << what << ": state";
  };
  std::vector<size_t> all(batch.lengths.size());
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;

  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const DeltaInputs in({2, 4, 128, 128}, dtype, batch, 91);
    const auto recurrent = in.run(*gpu, GdnAlgo::kRecurrent);
    const auto chunked = in.run(*gpu, GdnAlgo::kChunked);
    const auto automatic = in.run(*gpu, GdnAlgo::kAuto);
    expect_same(chunked, automatic, long_seqs, "kAuto, long sequences = kChunked");
    expect_same(recurrent, automatic, short_seqs, "kAuto, short sequences = kRecurrent");
    expect_same(automatic, in.run(*gpu, GdnAlgo::kAuto, 513), all, "an exact hint changes nothing");
    expect_same(recurrent, in.run(*gpu, GdnAlgo::kAuto, 1), all, "a hint of 1: the recurrent kernel for all");
    {
      const ScopedKernelOptions off(*gpu, [](KernelOptions& o) { o.gdn_chunked = false; });
      expect_same(recurrent, in.run(*gpu, GdnAlgo::kAuto), all, "KernelOptions::gdn_chunked off");
      expect_same(chunked, in.run(*gpu, GdnAlgo::kChunked), all, "an explicit kChunked outranks the option");
    }
    {
      const ScopedKernelOptions from_one(*gpu, [](KernelOptions& o) { o.gdn_chunked_min_tokens = 1; });
      expect_same(chunked, in.run(*gpu, GdnAlgo::kAuto), all, "KernelOptions::gdn_chunked_min_tokens = 1");
    }
  }
  for (const DeltaShape& s : {DeltaShape{1, 2, 160, 32}, DeltaShape{1, 2, 18, 16}, DeltaShape{1, 2, 36, 16}}) {
    SCOPED_TRACE(fmt::format("dk {} (outside the chunked kernel)", s.dk));
    const DeltaInputs in(s, DType::kF32, batch, 17);
    expect_same(in.run(*gpu, GdnAlgo::kRecurrent), in.run(*gpu, GdnAlgo::kChunked), all, "kChunked = kRecurrent");
  }
}

// A prompt split over several calls (chunked prefill, then decode) ends where one call ends: pieces
// of 1, 7 and 64 tokens and an uneven split, under every form. The recurrent kernel does the same
// arithmetic either way (bitwise), so does the chunked one when the pieces keep its 64-token chunk
// boundaries; otherwise the chunks differ and so does the rounding (f32 tolerance).
TEST(CudaGdn, DeltaRuleCarriesTheStateAcrossCalls) {
  PAGELLM_GPU_OR_SKIP(gpu);
  const int64_t hk = 2, hv = 4, dk = 128, dv = 128, t = 200;
  Rng rng(77);
  const Tensor q = random_tensor({t, hk, dk}, DType::kF32, rng), k = random_tensor({t, hk, dk}, DType::kF32, rng);
  const Tensor v = random_tensor({t, hv, dv}, DType::kF32, rng);
  const Tensor a = random_tensor({t, hv}, DType::kF32, rng, -2, 2), b = random_tensor({t, hv}, DType::kF32, rng, -2, 2);
  const Tensor a_log = random_tensor({hv}, DType::kF32, rng, 0, 1), dt_bias = random_tensor({hv}, DType::kF32, rng, 0, 1);
  Tensor dq = to_device(*gpu, q.view()), dk_ = to_device(*gpu, k.view()), dv_ = to_device(*gpu, v.view());
  Tensor da = to_device(*gpu, a.view()), db = to_device(*gpu, b.view());
  Tensor dal = to_device(*gpu, a_log.view()), ddt = to_device(*gpu, dt_bias.view());
  auto run = [&](const std::vector<int64_t>& pieces, GdnAlgo algo) {
    Tensor state = gpu->alloc({2, hv, dk, dv}, DType::kF32);
    Tensor out = gpu->alloc({t, hv, dv}, DType::kF32);
    int64_t at = 0;
    for (int64_t n : pieces) {
      GpuParams p(*gpu, Batch({static_cast<int32_t>(n)}, {1}, {at == 0}));
      p.params.algo = algo;
      gpu->gdn_delta_rule(out.view().slice_rows(at, at + n), dq.view().slice_rows(at, at + n),
                          dk_.view().slice_rows(at, at + n), dv_.view().slice_rows(at, at + n),
                          da.view().slice_rows(at, at + n), db.view().slice_rows(at, at + n), dal.view(), ddt.view(),
                          state.view(), p.params);
      at += n;
    }
    EXPECT_EQ(at, t);
    return std::make_pair(to_host(*gpu, out.view()), to_host(*gpu, state.view()));
  };
  auto split = [&](int64_t piece) {
    std::vector<int64_t> pieces;
    for (int64_t at = 0; at < t; at += piece) pieces.push_back(std::min(piece, t - at));
    return pieces;
  };
  const std::vector<int64_t> uneven = {1, 7, 20, 1, 1, 10, 64, 96};
  for (GdnAlgo algo : {GdnAlgo::kAuto, GdnAlgo::kChunked, GdnAlgo::kRecurrent}) {
    SCOPED_TRACE(fmt::format("algo {}", static_cast<int>(algo)));
    const auto whole = run({t}, algo);
    for (const std::vector<int64_t>& pieces : {split(1), split(7), split(64), uneven}) {
      SCOPED_TRACE(fmt::format("pieces of {} ({} calls)", pieces[0], pieces.size()));
      const bool bitwise = algo == GdnAlgo::kRecurrent || (algo == GdnAlgo::kChunked && pieces == split(64));
      const double rel = bitwise ? 0 : 1e-4, abs = bitwise ? 0 : 2e-5;
      const auto got = run(pieces, algo);
      EXPECT_EQ(compare_tensors(whole.first, got.first, rel, abs), "") << "out";
      EXPECT_EQ(compare_tensors(whole.second, got.second, rel, abs), "") << "state";
    }
  }
  // And the forms agree with each other on the whole prompt.
  const auto recurrent = run({t}, GdnAlgo::kRecurrent), chunked = run({t}, GdnAlgo::kChunked);
  EXPECT_EQ(compare_tensors(recurrent.first, chunked.first, 1e-4, 2e-5), "") << "out, chunked vs recurrent";
  EXPECT_EQ(compare_tensors(recurrent.second, chunked.second, 1e-4, 2e-5), "") << "state, chunked vs recurrent";
}

// ----- gated_rms_norm, sigmoid_mul, add_rows_scaled ---------------------------------------------

TEST(CudaGdn, GatedRmsNormMatchesCpuInPlace) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (DType dtype : kFloatTypes) {
    for (int64_t dv : {int64_t{16}, int64_t{128}}) {
      SCOPED_TRACE(fmt::format("{} dv {}", dtype_name(dtype), dv));
      Rng rng(static_cast<uint64_t>(dv));
      const int64_t t = 37, hv = 4;
      const Tensor x = random_tensor({t, hv, dv}, dtype, rng, -3, 3);
      const Tensor zbuf = random_tensor({t, 8 + hv * dv}, dtype, rng, -4, 4);
      const Tensor w = random_tensor({dv}, dtype, rng, 0.5f, 1.5f);
      Tensor want = Tensor::cpu({t, hv, dv}, dtype);
      cpu.gated_rms_norm(want.view(), x.view(), heads_of(zbuf.view(), 8, hv, dv), w.view(), 1e-6f);
      Tensor dx = to_device(*gpu, x.view()), dz = to_device(*gpu, zbuf.view()), dw = to_device(*gpu, w.view());
      gpu->gated_rms_norm(dx.view(), dx.view(), heads_of(dz.view(), 8, hv, dv), dw.view(), 1e-6f);
      const Tol tol = dtype == DType::kF32 ? ulps(dtype, 8, 1e-6) : ulps(dtype, 3, 1e-6);
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, dx.view()), tol.rel, tol.abs), "");
    }
  }
}

TEST(CudaGdn, SigmoidMulMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Rng rng(5);
    const int64_t t = 19, nh = 3, hd = 64;
    // Gated attention: q and gate interleaved per head in one [T, 2 nH hd] buffer; out separate.
    const Tensor qg = random_tensor({t, 2 * nh * hd}, dtype, rng, -4, 4);
    const Tensor x = random_tensor({t, nh, hd}, dtype, rng, -2, 2);
    Tensor want = Tensor::cpu({t, nh, hd}, dtype);
    cpu.sigmoid_mul(want.view(), x.view(), heads_of(qg.view(), hd, nh, hd, 2 * hd));
    Tensor dqg = to_device(*gpu, qg.view()), dx = to_device(*gpu, x.view());
    Tensor dout = poisoned(*gpu, {t, nh, hd}, dtype);
    gpu->sigmoid_mul(dout.view(), dx.view(), heads_of(dqg.view(), hd, nh, hd, 2 * hd));
    const Tol tol = ulps(dtype, 2, 1e-6);
    EXPECT_EQ(compare_tensors(want, to_host(*gpu, dout.view()), tol.rel, tol.abs), "") << "full-width gate";

    // The shared expert: one gate per row, in place.
    const Tensor y = random_tensor({t, 200}, dtype, rng, -2, 2), gate = random_tensor({t, 1}, dtype, rng, -4, 4);
    Tensor want_y = converted(y, dtype);
    cpu.sigmoid_mul(want_y.view(), want_y.view(), gate.view());
    Tensor dy = to_device(*gpu, y.view()), dgate = to_device(*gpu, gate.view());
    gpu->sigmoid_mul(dy.view(), dy.view(), dgate.view());
    EXPECT_EQ(compare_tensors(want_y, to_host(*gpu, dy.view()), tol.rel, tol.abs), "") << "per-row gate";
  }
}

TEST(CudaGdn, AddRowsScaledMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Rng rng(9);
    const int64_t rows = 10, h = 300;
    const Tensor out0 = random_tensor({rows, h}, dtype, rng), x = random_tensor({7, h}, dtype, rng, -3, 3);
    const Tensor ids = i32_tensor({3, 0, 3, 9, 1, 3, 5});  // row 3 three times, in order
    const Tensor weights = f32_tensor({0.5f, 0.25f, 0.125f, 0.9f, 0.3f, 0.7f, 0.01f});
    Tensor want = converted(out0, dtype);
    cpu.add_rows_scaled(want.view(), x.view(), ids.view(), weights.view());
    Tensor dout = to_device(*gpu, out0.view()), dx = to_device(*gpu, x.view());
    Tensor dids = to_device(*gpu, ids.view()), dw = to_device(*gpu, weights.view());
    gpu->add_rows_scaled(dout.view(), dx.view(), dids.view(), dw.view());
    EXPECT_EQ(compare_tensors(want, to_host(*gpu, dout.view()), 0, 0), "");
  }
}

}  // namespace
}  // namespace pagellm::cuda_test
