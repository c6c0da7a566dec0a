// Each CUDA op against its CPU twin (backend/cpu/cpu_backend.cpp) on random data, over sizes and
// dtypes: f32 near-exact, bf16 within one or two bf16 ulps. Outputs are poisoned (NaN) before each
// GPU run so unwritten elements fail. Skips, with the reason, where there is no GPU or no CUDA build.
#include <cmath>
#include <cstring>
#include <tuple>
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

// A device tensor filled with NaN (so a kernel that skips an element is caught).
Tensor poisoned(Backend& gpu, Shape shape, DType dtype) {
  Tensor host = Tensor::cpu(shape, dtype);
  fill_nan(host);
  return to_device(gpu, host.view());
}

TEST(CudaBackend, MakeBackendSaysWhyWhenThereIsNoGpu) {
  const std::vector<std::string> names = available_backends();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) GTEST_SKIP() << "built without CUDA";
  auto made = make_backend("cuda");
  if (made.has_value()) {
    EXPECT_EQ((*made)->name(), "cuda");
    EXPECT_EQ((*made)->device(), Device::kCuda);
    EXPECT_EQ((*made)->weight_dtype(DType::kBF16), DType::kBF16);
    EXPECT_EQ((*made)->weight_dtype(DType::kF32), DType::kF32);
  } else {
    EXPECT_EQ(made.status().message().rfind("[cuda] no CUDA device: ", 0), 0u) << made.status().message();
  }
}

TEST(CudaBackend, AllocIsZeroedAndCopiesRoundTrip) {
  PAGELLM_GPU_OR_SKIP(gpu);
  Tensor zeros = to_host(*gpu, gpu->alloc({3, 1000}, DType::kBF16).view());
  for (int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.ptr<uint16_t>()[i], 0);
  EXPECT_FALSE(gpu->alloc({0, 7}, DType::kF32).defined());

  Rng rng(1);
  const Tensor host = random_tensor({7, 40}, DType::kF32, rng);
  Tensor device = to_device(*gpu, host.view());
  Tensor device_copy = gpu->alloc({7, 40}, DType::kF32);
  gpu->copy(device_copy.view(), device.view());
  EXPECT_EQ(compare_tensors(host, to_host(*gpu, device_copy.view()), 0, 0), "");

  // Strided rows both ways: columns [8, 24) of the [7, 40] buffer, as [7, 2, 8] heads.
  TensorView columns = device.view();
  columns.data = static_cast<float*>(columns.data) + 8;
  columns.shape = Shape{7, 2, 8};
  columns.strides = {40, 8, 1, 0};
  const Tensor got = to_host(*gpu, columns);
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 16; ++c) ASSERT_EQ(got.ptr<float>()[r * 16 + c], host.ptr<float>()[r * 40 + 8 + c]);
  const Tensor fresh = random_tensor({7, 2, 8}, DType::kF32, rng);
  gpu->copy(columns, fresh.view());
  const Tensor back = to_host(*gpu, device.view());
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 40; ++c) {
      const float want = c >= 8 && c < 24 ? fresh.ptr<float>()[r * 16 + c - 8] : host.ptr<float>()[r * 40 + c];
      ASSERT_EQ(back.ptr<float>()[r * 40 + c], want) << r << "," << c;
    }
}

TEST(CudaBackendDeathTest, OutOfMemorySaysHowMuch) {
  PAGELLM_GPU_OR_SKIP(gpu);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: no fork of a CUDA context
  EXPECT_DEATH(gpu->alloc({int64_t{1} << 50}, DType::kF32), "out of GPU memory: asked for 4503599627370496 bytes");
}

struct MatmulShape {
  int64_t m, n, k;
};

TEST(CudaOps, MatmulMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(2);
  for (DType dtype : kFloatTypes) {
    for (MatmulShape s : {MatmulShape{1, 64, 32}, MatmulShape{7, 96, 80}, MatmulShape{33, 257, 128},
                          MatmulShape{128, 512, 1024}, MatmulShape{1, 3072, 1024}}) {
      for (bool strided : {false, true}) {
        SCOPED_TRACE(fmt::format("{} m{} n{} k{} strided {}", dtype_name(dtype), s.m, s.n, s.k, strided));
        // Strided: x and out are column ranges of wider buffers (as q/k/v of a fused qkv are).
        const int64_t x_width = strided ? s.k + 16 : s.k, out_width = strided ? s.n + 8 : s.n;
        const Tensor x_full = random_tensor({s.m, x_width}, dtype, rng);
        const Tensor w = random_tensor({s.n, s.k}, dtype, rng);
        TensorView x_host = x_full.view();
        x_host.shape = Shape{s.m, s.k};
        Tensor want = Tensor::cpu({s.m, s.n}, dtype);
        const Tensor w_f32 = converted(w, DType::kF32);
        cpu.matmul(want.view(), x_host, w_f32.view());

        Tensor x_dev = to_device(*gpu, x_full.view());
        TensorView x_view = x_dev.view();
        x_view.shape = Shape{s.m, s.k};
        Tensor w_dev = to_device(*gpu, w.view());
        Tensor out_dev = poisoned(*gpu, {s.m, out_width}, dtype);
        TensorView out_view = out_dev.view();
        out_view.shape = Shape{s.m, s.n};
        gpu->matmul(out_view, x_view, w_dev.view());
        const Tensor got = to_host(*gpu, out_view);
        // f32: sums of k products in another order; bf16: the f32 sum rounded once (one ulp), plus
        // an absolute slack for outputs near zero after cancellation.
        const Tol tol = dtype == DType::kF32 ? Tol{1e-5, 1e-5 * std::sqrt(static_cast<double>(s.k))}
                                             : Tol{0x1.0p-7, 1e-3};
        EXPECT_EQ(compare_tensors(want, got, tol.rel, tol.abs), "");
      }
    }
  }
}

TEST(CudaOps, RmsNormMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(3);
  for (DType dtype : kFloatTypes) {
    for (NormWeight mode : {NormWeight::kPlain, NormWeight::kOnePlus, NormWeight::kF32Weight}) {
      for (int64_t d : {16, 128, 1024, 1000, 2880, 5120}) {  // 2880 and 5120: the two longer block forms
        SCOPED_TRACE(fmt::format("{} d{} norm weight form {}", dtype_name(dtype), d, static_cast<int>(mode)));
        const Tensor x = random_tensor({37, d}, dtype, rng, -3, 3);
        const Tensor w = random_tensor({d}, dtype, rng, -1.5f, 1.5f);
        Tensor want = Tensor::cpu({37, d}, dtype);
        cpu.rms_norm(want.view(), x.view(), converted(w, DType::kF32).view(), 1e-6f, mode);
        Tensor x_dev = to_device(*gpu, x.view()), w_dev = to_device(*gpu, w.view());
        Tensor out_dev = poisoned(*gpu, {37, d}, dtype);
        gpu->rms_norm(out_dev.view(), x_dev.view(), w_dev.view(), 1e-6f, mode);
        EXPECT_EQ(compare_tensors(want, to_host(*gpu, out_dev.view()), ulps(dtype, 2).rel, 1e-5), "");
        // In place, as the model normalises q and k heads inside the fused qkv buffer.
        gpu->rms_norm(x_dev.view(), x_dev.view(), w_dev.view(), 1e-6f, mode);
        EXPECT_EQ(compare_tensors(want, to_host(*gpu, x_dev.view()), ulps(dtype, 2).rel, 1e-5), "");
      }
    }
    // Per-head norm on a strided [T, heads, head_dim] view of a fused buffer.
    const int64_t t = 9, heads = 3, hd = 64, width = 5 * hd;
    const Tensor fused = random_tensor({t, width}, dtype, rng, -2, 2);
    const Tensor w = random_tensor({hd}, dtype, rng);
    auto heads_view = [&](const Tensor& buffer) {
      TensorView v = buffer.view();
      v.data = static_cast<char*>(v.data) + hd * dtype_size_bytes(dtype);  // columns [hd, 4 hd)
      v.shape = Shape{t, heads, hd};
      v.strides = {width, hd, 1, 0};
      return v;
    };
    Tensor want = Tensor::cpu({t, width}, dtype);
    std::memcpy(want.view().data, fused.view().data, fused.nbytes());
    cpu.rms_norm(heads_view(want), heads_view(want), converted(w, DType::kF32).view(), 1e-6f, NormWeight::kPlain);
    Tensor dev = to_device(*gpu, fused.view()), w_dev = to_device(*gpu, w.view());
    gpu->rms_norm(heads_view(dev), heads_view(dev), w_dev.view(), 1e-6f, NormWeight::kPlain);
    EXPECT_EQ(compare_tensors(want, to_host(*gpu, dev.view()), ulps(dtype, 2).rel, 1e-5), "") << "strided heads";
  }
}

TEST(CudaOps, AddAndActMulMatchCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(4);
  for (DType dtype : kFloatTypes) {
    for (int64_t rows : {1, 5, 300}) {
      SCOPED_TRACE(fmt::format("{} rows {}", dtype_name(dtype), rows));
      const Tensor a = random_tensor({rows, 1000}, dtype, rng, -4, 4), b = random_tensor({rows, 1000}, dtype, rng, -4, 4);
      Tensor want = Tensor::cpu({rows, 1000}, dtype);
      cpu.add(want.view(), a.view(), b.view());
      Tensor a_dev = to_device(*gpu, a.view()), b_dev = to_device(*gpu, b.view());
      Tensor out_dev = poisoned(*gpu, {rows, 1000}, dtype);
      gpu->add(out_dev.view(), a_dev.view(), b_dev.view());
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, out_dev.view()), 0, 0), "") << "add";
      gpu->add(a_dev.view(), a_dev.view(), b_dev.view());  // in place, as the residual stream
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, a_dev.view()), 0, 0), "") << "add in place";

      // Widths: 16-byte pieces in one chunk, two chunks of 2,048 columns, and an odd width (scalar).
      // The clamped SwiGLU (gpt-oss) on [-10, 10]: both clamps at 7 are crossed; it rounds five times.
      for (Activation act : {Activation::kSilu, Activation::kGeluTanh, Activation::kClampedSwiglu}) {
        const bool clamped = act == Activation::kClampedSwiglu;
        for (int64_t width : {768, 3072, 1001}) {
          const Tensor gate_up = random_tensor({rows, 2 * width}, dtype, rng, clamped ? -10 : -6, clamped ? 10 : 6);
          Tensor want_act = Tensor::cpu({rows, width}, dtype);
          cpu.act_mul(want_act.view(), gate_up.view(), act);
          Tensor gu_dev = to_device(*gpu, gate_up.view());
          Tensor act_dev = poisoned(*gpu, {rows, width}, dtype);
          gpu->act_mul(act_dev.view(), gu_dev.view(), act);
          EXPECT_EQ(compare_tensors(want_act, to_host(*gpu, act_dev.view()), ulps(dtype, clamped ? 3 : 1).rel, 1e-6), "")
              << "act_mul " << static_cast<int>(act) << " width " << width;
        }
      }
    }
  }
}

// The small elementwise ops of the dense families: a Linear's bias, the embedding scale and the final
// logit soft-cap (each rounding where transformers rounds).
TEST(CudaOps, AddBiasScaleAndSoftcapMatchCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(7);
  for (DType dtype : kFloatTypes) {
    for (int64_t rows : {1, 37}) {
      SCOPED_TRACE(fmt::format("{} rows {}", dtype_name(dtype), rows));
      const Tensor x = random_tensor({rows, 1001}, dtype, rng, -40, 40);
      const Tensor bias = random_tensor({1001}, dtype, rng, -2, 2);
      Tensor want = Tensor::cpu({rows, 1001}, dtype);
      std::memcpy(want.view().data, x.view().data, x.nbytes());
      Tensor got = to_device(*gpu, x.view());
      const Tensor bias_dev = to_device(*gpu, bias.view());
      cpu.add_bias(want.view(), bias.view());
      gpu->add_bias(got.view(), bias_dev.view());
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, got.view()), 0, 0), "") << "add_bias";
      cpu.scale(want.view(), want.view(), 8.0f);
      gpu->scale(got.view(), got.view(), 8.0f);
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, got.view()), 0, 0), "") << "scale";
      cpu.softcap(want.view(), 30.0f);
      gpu->softcap(got.view(), 30.0f);
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, got.view()), ulps(dtype, 1).rel, 1e-6), "") << "softcap";
    }
  }
}

TEST(CudaOps, RopeMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(5);
  for (DType dtype : kFloatTypes) {
    for (int64_t hd : {64, 128}) {
      for (bool partial : {false, true}) {
        for (float scaling : {1.0f, 0.75f}) {
          SCOPED_TRACE(fmt::format("{} hd{} partial {} scaling {}", dtype_name(dtype), hd, partial, scaling));
          const int64_t t = 23, heads = 4, width = 6 * hd, half = partial ? hd / 4 : hd / 2;
          Tensor inv_freq = Tensor::cpu({half}, DType::kF32);
          for (int64_t i = 0; i < half; ++i)
            inv_freq.ptr<float>()[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * static_cast<double>(i) / (2 * half)));
          Tensor positions = Tensor::cpu({t}, DType::kI32);
          for (int64_t i = 0; i < t; ++i) positions.ptr<int32_t>()[i] = static_cast<int32_t>(rng.below(40000));
          const Tensor fused = random_tensor({t, width}, dtype, rng, -3, 3);
          auto heads_view = [&](const Tensor& buffer) {  // columns [2 hd, 6 hd): 4 heads
            TensorView v = buffer.view();
            v.data = static_cast<char*>(v.data) + 2 * hd * dtype_size_bytes(dtype);
            v.shape = Shape{t, heads, hd};
            v.strides = {width, hd, 1, 0};
            return v;
          };
          Tensor want = Tensor::cpu({t, width}, dtype);
          std::memcpy(want.view().data, fused.view().data, fused.nbytes());
          cpu.rope(heads_view(want), positions.view(), inv_freq.view(), scaling);
          Tensor dev = to_device(*gpu, fused.view());
          Tensor pos_dev = to_device(*gpu, positions.view()), freq_dev = to_device(*gpu, inv_freq.view());
          gpu->rope(heads_view(dev), pos_dev.view(), freq_dev.view(), scaling);
          // cos/sin of large angles may differ by an f32 ulp between libm and CUDA, which can tip a
          // bf16 rounding of cos, sin or a product.
          EXPECT_EQ(compare_tensors(want, to_host(*gpu, dev.view()), ulps(dtype, 2).rel, dtype == DType::kF32 ? 1e-5 : 0.02), "");
        }
      }
    }
  }
}

TEST(CudaOps, EmbeddingGathersRows) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(6);
  for (DType dtype : kFloatTypes) {
    const Tensor table = random_tensor({1000, 96}, dtype, rng);
    Tensor ids = Tensor::cpu({17}, DType::kI32);
    for (int64_t i = 0; i < 17; ++i) ids.ptr<int32_t>()[i] = static_cast<int32_t>(rng.below(1000));
    ids.ptr<int32_t>()[3] = 999;
    ids.ptr<int32_t>()[4] = 0;
    Tensor want = Tensor::cpu({17, 96}, dtype);
    cpu.embedding(want.view(), table.view(), ids.view());
    Tensor table_dev = to_device(*gpu, table.view()), ids_dev = to_device(*gpu, ids.view());
    Tensor out_dev = poisoned(*gpu, {17, 96}, dtype);
    gpu->embedding(out_dev.view(), table_dev.view(), ids_dev.view());
    EXPECT_EQ(compare_tensors(want, to_host(*gpu, out_dev.view()), 0, 0), "") << dtype_name(dtype);

    // Gathering rows of an activation view (the model picks its last rows this way) into a strided out.
    TensorView rows_view = table_dev.view().slice_rows(0, 40);
    Tensor wide_dev = poisoned(*gpu, {17, 200}, dtype);
    TensorView out_view = wide_dev.view();
    out_view.shape = Shape{17, 96};
    for (int64_t i = 0; i < 17; ++i) ids.ptr<int32_t>()[i] = static_cast<int32_t>(rng.below(40));
    Tensor want_rows = Tensor::cpu({17, 96}, dtype);
    cpu.embedding(want_rows.view(), table.view().slice_rows(0, 40), ids.view());
    ids_dev = to_device(*gpu, ids.view());
    gpu->embedding(out_view, rows_view, ids_dev.view());
    EXPECT_EQ(compare_tensors(want_rows, to_host(*gpu, out_view), 0, 0), "") << "strided";
  }
}

TEST(CudaOps, WriteKvMatchesCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(7);
  for (DType dtype : kFloatTypes) {
    const int64_t num_blocks = 12, block_size = 16, kv_heads = 2, hd = 64, t = 40;
    const int64_t width = (4 + 2 * kv_heads) * hd;  // a fused qkv row: 4 q heads, then k, then v
    const Tensor qkv = random_tensor({t, width}, dtype, rng);
    const Tensor cache_init = random_tensor({num_blocks, block_size, kv_heads, hd}, dtype, rng);
    Tensor slots = Tensor::cpu({t}, DType::kI64);
    std::vector<int64_t> free_slots(static_cast<size_t>(num_blocks * block_size));
    for (size_t i = 0; i < free_slots.size(); ++i) free_slots[i] = static_cast<int64_t>(i);
    for (int64_t i = 0; i < t; ++i) {  // distinct random slots, some tokens skipped
      const int64_t pick = i + rng.below(static_cast<int64_t>(free_slots.size()) - i);
      std::swap(free_slots[static_cast<size_t>(i)], free_slots[static_cast<size_t>(pick)]);
      slots.ptr<int64_t>()[i] = i % 7 == 3 ? -1 : free_slots[static_cast<size_t>(i)];
    }
    auto kv_view = [&](const Tensor& buffer, int64_t first_head) {
      TensorView v = buffer.view();
      v.data = static_cast<char*>(v.data) + first_head * hd * dtype_size_bytes(dtype);
      v.shape = Shape{t, kv_heads, hd};
      v.strides = {width, hd, 1, 0};
      return v;
    };
    Tensor k_want = Tensor::cpu(cache_init.shape(), dtype), v_want = Tensor::cpu(cache_init.shape(), dtype);
    std::memcpy(k_want.view().data, cache_init.view().data, cache_init.nbytes());
    std::memcpy(v_want.view().data, cache_init.view().data, cache_init.nbytes());
    cpu.write_kv(k_want.view(), v_want.view(), kv_view(qkv, 4), kv_view(qkv, 4 + kv_heads), slots.view());
    Tensor k_dev = to_device(*gpu, cache_init.view()), v_dev = to_device(*gpu, cache_init.view());
    Tensor qkv_dev = to_device(*gpu, qkv.view()), slots_dev = to_device(*gpu, slots.view());
    gpu->write_kv(k_dev.view(), v_dev.view(), kv_view(qkv_dev, 4), kv_view(qkv_dev, 4 + kv_heads), slots_dev.view());
    EXPECT_EQ(compare_tensors(k_want, to_host(*gpu, k_dev.view()), 0, 0), "") << "k " << dtype_name(dtype);
    EXPECT_EQ(compare_tensors(v_want, to_host(*gpu, v_dev.view()), 0, 0), "") << "v " << dtype_name(dtype);
  }
}

// The fused residual add + norm: bitwise the CUDA add followed by the CUDA rms_norm, and within the
// norm's tolerance of the CPU twin (Backend's default body: add, then rms_norm).
TEST(CudaOps, FusedAddRmsNormEqualsAddThenNorm) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(11);
  for (DType dtype : kFloatTypes) {
    for (int64_t d : {128, 1000, 1024, 2880, 5120, 9000}) {  // every block form of the norm
      for (int64_t rows : {1, 37}) {
        SCOPED_TRACE(fmt::format("{} d{} rows {}", dtype_name(dtype), d, rows));
        const Tensor hidden = random_tensor({rows, d}, dtype, rng, -3, 3), delta = random_tensor({rows, d}, dtype, rng, -3, 3);
        const Tensor w = random_tensor({d}, dtype, rng, -1.5f, 1.5f);
        Tensor want_hidden = Tensor::cpu({rows, d}, dtype), want_normed = Tensor::cpu({rows, d}, dtype);
        std::memcpy(want_hidden.view().data, hidden.view().data, hidden.nbytes());
        cpu.add_rms_norm(want_hidden.view(), want_normed.view(), delta.view(), converted(w, DType::kF32).view(), 1e-6f,
                         NormWeight::kPlain);
        const Tensor w_dev = to_device(*gpu, w.view()), delta_dev = to_device(*gpu, delta.view());
        Tensor fused_hidden = to_device(*gpu, hidden.view()), fused_normed = poisoned(*gpu, {rows, d}, dtype);
        gpu->add_rms_norm(fused_hidden.view(), fused_normed.view(), delta_dev.view(), w_dev.view(), 1e-6f, NormWeight::kPlain);
        Tensor plain_hidden = to_device(*gpu, hidden.view()), plain_normed = poisoned(*gpu, {rows, d}, dtype);
        gpu->add(plain_hidden.view(), plain_hidden.view(), delta_dev.view());
        gpu->rms_norm(plain_normed.view(), plain_hidden.view(), w_dev.view(), 1e-6f, NormWeight::kPlain);
        const Tensor got_hidden = to_host(*gpu, fused_hidden.view()), got_normed = to_host(*gpu, fused_normed.view());
        EXPECT_EQ(compare_tensors(to_host(*gpu, plain_hidden.view()), got_hidden, 0, 0), "") << "hidden vs unfused";
        EXPECT_EQ(compare_tensors(to_host(*gpu, plain_normed.view()), got_normed, 0, 0), "") << "normed vs unfused";
        EXPECT_EQ(compare_tensors(want_hidden, got_hidden, 0, 0), "") << "hidden vs cpu";
        EXPECT_EQ(compare_tensors(want_normed, got_normed, ulps(dtype, 2).rel, 1e-5), "") << "normed vs cpu";
      }
    }
  }
}

// The last block's add, the gather of the sampling rows and the final norm in one op: `last` bitwise the
// GPU's add, embedding (gather) and rms_norm, within the norm tolerance of the CPU twin, for every norm
// form (128: the warp form, three launches; 9,000: shared memory) and gathers that repeat and reorder rows.
TEST(CudaOps, AddGatherRmsNormEqualsAddGatherThenNorm) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(12);
  const std::vector<std::vector<int32_t>> gathers = {{0}, {36}, {36, 0, 5, 5, 17}};
  for (DType dtype : kFloatTypes) {
    for (int64_t d : {128, 1024, 2880, 5120, 9000}) {
      for (const std::vector<int32_t>& gather : gathers) {
        const int64_t tokens = 37, num_rows = static_cast<int64_t>(gather.size());
        SCOPED_TRACE(fmt::format("{} d{} rows {}", dtype_name(dtype), d, num_rows));
        const Tensor hidden = random_tensor({tokens, d}, dtype, rng, -3, 3);
        const Tensor delta = random_tensor({tokens, d}, dtype, rng, -3, 3);
        const Tensor w = random_tensor({d}, dtype, rng, -1.5f, 1.5f);
        Tensor rows = Tensor::cpu({num_rows}, DType::kI32);
        std::memcpy(rows.view().data, gather.data(), gather.size() * sizeof(int32_t));
        Tensor want = Tensor::cpu({num_rows, d}, dtype), cpu_hidden = Tensor::cpu({tokens, d}, dtype);
        std::memcpy(cpu_hidden.view().data, hidden.view().data, hidden.nbytes());
        cpu.add_gather_rms_norm(want.view(), cpu_hidden.view(), delta.view(), rows.view(),
                                converted(w, DType::kF32).view(), 1e-6f, NormWeight::kPlain);
        const Tensor w_dev = to_device(*gpu, w.view()), delta_dev = to_device(*gpu, delta.view());
        const Tensor rows_dev = to_device(*gpu, rows.view());
        Tensor fused_hidden = to_device(*gpu, hidden.view()), fused = poisoned(*gpu, {num_rows, d}, dtype);
        gpu->add_gather_rms_norm(fused.view(), fused_hidden.view(), delta_dev.view(), rows_dev.view(), w_dev.view(),
                                 1e-6f, NormWeight::kPlain);
        Tensor plain_hidden = to_device(*gpu, hidden.view()), plain = poisoned(*gpu, {num_rows, d}, dtype);
        gpu->add(plain_hidden.view(), plain_hidden.view(), delta_dev.view());
        gpu->embedding(plain.view(), plain_hidden.view(), rows_dev.view());
        gpu->rms_norm(plain.view(), plain.view(), w_dev.view(), 1e-6f, NormWeight::kPlain);
        const Tensor got = to_host(*gpu, fused.view());
        EXPECT_EQ(compare_tensors(to_host(*gpu, plain.view()), got, 0, 0), "") << "vs unfused";
        EXPECT_EQ(compare_tensors(want, got, ulps(dtype, 2).rel, 1e-5), "") << "vs cpu";
      }
    }
  }
}

// The fused attention prologue (q/k norm + RoPE + write_kv) on a fused qkv buffer: bitwise the
// unfused CUDA ops, and within the rope tolerance of the CPU twin (Backend's default body). Also on
// Qwen3.5's gated layout (q_proj rows (q_h | gate_h) per head: q heads 2 hd apart, the gates left
// as they are) with its (1 + w) norms and head_dim 256.
TEST(CudaOps, FusedQkNormRopeWriteKvEqualsUnfused) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(12);
  struct Layout {
    bool gated;
    int64_t hd;
  };
  for (DType dtype : kFloatTypes) {
    for (const Layout layout : {Layout{false, 64}, Layout{false, 128}, Layout{true, 128}, Layout{true, 256}}) {
      const bool gated = layout.gated;
      const int64_t hd = layout.hd;
      const NormWeight mode = gated ? NormWeight::kOnePlus : NormWeight::kPlain;
      // 29 tokens: a token's 24 heads spread over 3 blocks; 70 tokens: one block per token.
      // Without q/k norms (Llama, Mistral, Qwen2) the prologue is RoPE + cache write alone.
      const std::tuple<bool, int64_t, bool> cases[] = {{false, 29, true}, {true, 29, true}, {false, 70, true},
                                                       {true, 70, true},  {false, 29, false}, {true, 70, false}};
      for (const auto& [partial, t, with_norm] : cases) {
        SCOPED_TRACE(fmt::format("{} {} hd{} partial {} tokens {} norm {}", dtype_name(dtype), gated ? "gated" : "dense",
                                 hd, partial, t, with_norm));
        const int64_t q_heads = 16, kv_heads = 8, q_cols = (gated ? 2 : 1) * q_heads * hd,
                      width = q_cols + 2 * kv_heads * hd;
        const int64_t num_blocks = 8, block_size = 16, half = partial ? hd / 4 : hd / 2;
        const float scaling = partial ? 0.75f : 1.0f;
        Tensor inv_freq = Tensor::cpu({half}, DType::kF32);
        for (int64_t i = 0; i < half; ++i)
          inv_freq.ptr<float>()[i] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * static_cast<double>(i) / (2 * half)));
        Tensor positions = Tensor::cpu({t}, DType::kI32);
        Tensor slots = Tensor::cpu({t}, DType::kI64);
        for (int64_t i = 0; i < t; ++i) {
          positions.ptr<int32_t>()[i] = static_cast<int32_t>(rng.below(40000));
          slots.ptr<int64_t>()[i] = i % 5 == 2 ? -1 : (i * 37) % (num_blocks * block_size);  // distinct for t < 128
        }
        const Tensor qkv = random_tensor({t, width}, dtype, rng, -3, 3);
        const Tensor q_norm = random_tensor({hd}, dtype, rng, -1.5f, 1.5f), k_norm = random_tensor({hd}, dtype, rng, -1.5f, 1.5f);
        const Tensor cache_init = random_tensor({num_blocks, block_size, kv_heads, hd}, dtype, rng);
        auto heads = [&](const Tensor& buffer, int64_t first_col, int64_t n, int64_t head_stride) {
          TensorView v = buffer.view();
          v.data = static_cast<char*>(v.data) + first_col * dtype_size_bytes(dtype);
          v.shape = Shape{t, n, hd};
          v.strides = {width, head_stride, 1, 0};
          return v;
        };
        auto run = [&](Backend& be, const Tensor& buffer, Tensor& k_cache, Tensor& v_cache, const Tensor& qn,
                       const Tensor& kn, const Tensor& pos, const Tensor& freq, const Tensor& slot, bool fused) {
          TensorView q = heads(buffer, 0, q_heads, gated ? 2 * hd : hd), k = heads(buffer, q_cols, kv_heads, hd),
                     v = heads(buffer, q_cols + kv_heads * hd, kv_heads, hd);
          const TensorView qn_view = with_norm ? qn.view() : TensorView(), kn_view = with_norm ? kn.view() : TensorView();
          if (fused) {
            be.qk_norm_rope_write_kv(q, k, v, qn_view, kn_view, 1e-6f, mode, pos.view(), freq.view(), scaling,
                                     k_cache.view(), v_cache.view(), slot.view());
          } else {
            be.Backend::qk_norm_rope_write_kv(q, k, v, qn_view, kn_view, 1e-6f, mode, pos.view(), freq.view(), scaling,
                                              k_cache.view(), v_cache.view(), slot.view());
          }
        };
        // CPU twin.
        Tensor want = Tensor::cpu({t, width}, dtype);
        std::memcpy(want.view().data, qkv.view().data, qkv.nbytes());
        Tensor k_want = Tensor::cpu(cache_init.shape(), dtype), v_want = Tensor::cpu(cache_init.shape(), dtype);
        std::memcpy(k_want.view().data, cache_init.view().data, cache_init.nbytes());
        std::memcpy(v_want.view().data, cache_init.view().data, cache_init.nbytes());
        run(cpu, want, k_want, v_want, converted(q_norm, DType::kF32), converted(k_norm, DType::kF32), positions, inv_freq,
            slots, false);
        // CUDA fused and unfused.
        const Tensor qn_dev = to_device(*gpu, q_norm.view()), kn_dev = to_device(*gpu, k_norm.view());
        const Tensor pos_dev = to_device(*gpu, positions.view()), freq_dev = to_device(*gpu, inv_freq.view()),
                     slot_dev = to_device(*gpu, slots.view());
        Tensor fused = to_device(*gpu, qkv.view()), k_fused = to_device(*gpu, cache_init.view()),
               v_fused = to_device(*gpu, cache_init.view());
        run(*gpu, fused, k_fused, v_fused, qn_dev, kn_dev, pos_dev, freq_dev, slot_dev, true);
        Tensor plain = to_device(*gpu, qkv.view()), k_plain = to_device(*gpu, cache_init.view()),
               v_plain = to_device(*gpu, cache_init.view());
        run(*gpu, plain, k_plain, v_plain, qn_dev, kn_dev, pos_dev, freq_dev, slot_dev, false);
        const Tensor got = to_host(*gpu, fused.view()), got_k = to_host(*gpu, k_fused.view());
        EXPECT_EQ(compare_tensors(to_host(*gpu, plain.view()), got, 0, 0), "") << "qkv vs unfused";
        EXPECT_EQ(compare_tensors(to_host(*gpu, k_plain.view()), got_k, 0, 0), "") << "k cache vs unfused";
        EXPECT_EQ(compare_tensors(to_host(*gpu, v_plain.view()), to_host(*gpu, v_fused.view()), 0, 0), "") << "v cache";
        EXPECT_EQ(compare_tensors(want, got, ulps(dtype, 2).rel, dtype == DType::kF32 ? 1e-5 : 0.03), "") << "qkv vs cpu";
        EXPECT_EQ(compare_tensors(k_want, got_k, ulps(dtype, 2).rel, dtype == DType::kF32 ? 1e-5 : 0.03), "") << "k vs cpu";
      }
    }
  }
}

TEST(CudaOps, ArgmaxAndLogSoftmaxMatchCpu) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(8);
  for (DType dtype : kFloatTypes) {
    for (int64_t vocab : {10, 1000, 151936}) {
      SCOPED_TRACE(fmt::format("{} vocab {}", dtype_name(dtype), vocab));
      const int64_t rows = 5;
      Tensor logits = random_tensor({rows, vocab}, dtype, rng, -20, 20);
      // Ties: row 1 has its maximum twice (the first must win), row 2 everywhere equal.
      store_float(logits.view().data, dtype, 1 * vocab + vocab / 3, 40.0f);
      store_float(logits.view().data, dtype, 1 * vocab + vocab - 1, 40.0f);
      for (int64_t i = 0; i < vocab; ++i) store_float(logits.view().data, dtype, 2 * vocab + i, 1.5f);
      Tensor want_ids = Tensor::cpu({rows}, DType::kI32);
      cpu.argmax(want_ids.view(), logits.view());
      Tensor logits_dev = to_device(*gpu, logits.view());
      Tensor ids_dev = gpu->alloc({rows}, DType::kI32);
      gpu->argmax(ids_dev.view(), logits_dev.view());
      const Tensor got_ids = to_host(*gpu, ids_dev.view());
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got_ids.ptr<int32_t>()[r], want_ids.ptr<int32_t>()[r]) << "row " << r;
      EXPECT_EQ(got_ids.ptr<int32_t>()[1], vocab / 3);
      EXPECT_EQ(got_ids.ptr<int32_t>()[2], 0);

      Tensor want = Tensor::cpu({rows, vocab}, DType::kF32);
      cpu.log_softmax(want.view(), logits.view());
      Tensor out_dev = poisoned(*gpu, {rows, vocab}, DType::kF32);
      gpu->log_softmax(out_dev.view(), logits_dev.view());
      EXPECT_EQ(compare_tensors(want, to_host(*gpu, out_dev.view()), 1e-5, 1e-4), "");
    }
  }
}

// copy_ids moves the ids of a still-running step into the next step's inputs: the same writes as the
// CPU twin, and an async copy to pinned memory is readable after wait_for(mark()).
TEST(CudaOps, CopyIdsEqualsTheCpuTwinAndAsyncReadBackWaitsForItsMark) {
  PAGELLM_GPU_OR_SKIP(gpu);
  CpuBackend cpu;
  Rng rng(31);
  const int64_t dst_size = 300, src_size = 40, num_pairs = 37;
  Tensor dst = Tensor::cpu({dst_size}, DType::kI32), src = Tensor::cpu({src_size}, DType::kI32);
  Tensor pairs = Tensor::cpu({num_pairs, 2}, DType::kI32);
  for (int64_t i = 0; i < dst_size; ++i) dst.ptr<int32_t>()[i] = -static_cast<int32_t>(i);
  for (int64_t i = 0; i < src_size; ++i) src.ptr<int32_t>()[i] = static_cast<int32_t>(rng.below(151936));
  for (int64_t i = 0; i < num_pairs; ++i) {
    pairs.ptr<int32_t>()[2 * i] = static_cast<int32_t>(i * 7 + 3);  // distinct destinations
    pairs.ptr<int32_t>()[2 * i + 1] = static_cast<int32_t>(rng.below(src_size));
  }
  Tensor dst_dev = to_device(*gpu, dst.view());
  gpu->copy_ids(dst_dev.view(), to_device(*gpu, src.view()).view(), to_device(*gpu, pairs.view()).view());
  cpu.copy_ids(dst.view(), src.view(), pairs.view());
  Tensor pinned = gpu->alloc_host({dst_size}, DType::kI32);
  gpu->copy_to_host_async(pinned.view(), dst_dev.view());
  gpu->wait_for(gpu->mark());
  EXPECT_EQ(std::memcmp(dst.view().data, pinned.view().data, dst.nbytes()), 0);
  EXPECT_EQ(dst.ptr<int32_t>()[3], src.ptr<int32_t>()[pairs.ptr<int32_t>()[1]]);
  EXPECT_EQ(dst.ptr<int32_t>()[4], -4);  // untouched
}

}  // namespace
}  // namespace pagellm::cuda_test
