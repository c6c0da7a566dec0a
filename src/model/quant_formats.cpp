#include "model/quant_formats.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace pagellm {

namespace {

// AutoAWQ packs columns 8c + kAwqOrder[i] into nibble i of word c; column 8c + j sits in nibble kAwqSlot[j].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int kAwqSlot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int nibble(int32_t word, int i) { return static_cast<int>((static_cast<uint32_t>(word) >> (4 * i)) & 0xFu); }
void set_nibble(int32_t& word, int i, int value) {
  word = static_cast<int32_t>(static_cast<uint32_t>(word) | ((static_cast<uint32_t>(value) & 0xFu) << (4 * i)));
}

Status check_int4_sizes(const PackedInt4& packed, int64_t n, int64_t k, int64_t g, size_t qweight_words,
                        const std::string& what) {
  if (k % g != 0 || g % 8 != 0)
    return invalid_argument("[checkpoint] {}: {} input features are not a whole number of groups of {}", what, k, g);
  if (n % 8 != 0) return invalid_argument("[checkpoint] {}: {} output features are not a multiple of 8", what, n);
  const size_t groups = static_cast<size_t>(k / g);
  if (packed.qweight.size() != qweight_words || packed.qzeros.size() != groups * static_cast<size_t>(n / 8) ||
      packed.scales.size() != groups * static_cast<size_t>(n))
    return invalid_argument("[checkpoint] {}: qweight/qzeros/scales sizes do not fit [{} out, {} in] in groups of {}",
                            what, n, k, g);
  return Status::ok();
}

Int4Weight empty_int4(int64_t n, int64_t k, int64_t g) {
  Int4Weight w;
  w.rows = n;
  w.cols = k;
  w.group_size = g;
  w.qweight.assign(static_cast<size_t>(n * k / 8), 0);
  w.scales.assign(static_cast<size_t>(n * (k / g)), 0.0f);
  w.zeros.assign(static_cast<size_t>(n * (k / g)), 0);
  return w;
}

int q_at(const Int4Weight& w, int64_t n, int64_t k) {
  return nibble(w.qweight[static_cast<size_t>(n * (w.cols / 8) + k / 8)], static_cast<int>(k % 8));
}

// Scales [K / g, N] and zeros (column c of group row gi from zero_of(gi, c)) into the row-major layout.
template <typename ZeroOf>
void fill_groups(Int4Weight& w, const std::vector<float>& scales, ZeroOf zero_of) {
  const int64_t groups = w.cols / w.group_size;
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t n = 0; n < w.rows; ++n) {
      const size_t dst = static_cast<size_t>(n * groups + gi);
      w.scales[dst] = scales[static_cast<size_t>(gi * w.rows + n)];
      w.zeros[dst] = static_cast<uint8_t>(zero_of(gi, n));
    }
}

}  // namespace

Expected<Int4Weight> unpack_awq(const PackedInt4& packed, int64_t n, int64_t k, int64_t g, const std::string& what) {
  PAGELLM_RETURN_IF_ERROR(check_int4_sizes(packed, n, k, g, static_cast<size_t>(k * (n / 8)), what));
  Int4Weight w = empty_int4(n, k, g);
  for (int64_t row_k = 0; row_k < k; ++row_k)
    for (int64_t col = 0; col < n; ++col) {
      const int q = nibble(packed.qweight[static_cast<size_t>(row_k * (n / 8) + col / 8)], kAwqSlot[col % 8]);
      set_nibble(w.qweight[static_cast<size_t>(col * (k / 8) + row_k / 8)], static_cast<int>(row_k % 8), q);
    }
  fill_groups(w, packed.scales, [&](int64_t gi, int64_t col) {
    return nibble(packed.qzeros[static_cast<size_t>(gi * (n / 8) + col / 8)], kAwqSlot[col % 8]);
  });
  return w;
}

Expected<Int4Weight> unpack_gptq(const PackedInt4& packed, const std::vector<int32_t>& g_idx, int64_t n, int64_t k,
                                 int64_t g, bool v2, const std::string& what) {
  PAGELLM_RETURN_IF_ERROR(check_int4_sizes(packed, n, k, g, static_cast<size_t>((k / 8) * n), what));
  if (!g_idx.empty()) {
    if (static_cast<int64_t>(g_idx.size()) != k)
      return invalid_argument("[checkpoint] {}: g_idx has {} entries, expected {}", what, g_idx.size(), k);
    for (int64_t i = 0; i < k; ++i)
      if (g_idx[static_cast<size_t>(i)] != i / g)
        return invalid_argument("[checkpoint] {}: g_idx[{}] = {} is not {} / {}: act-order (desc_act) GPTQ weights "
                                "are not supported",
                                what, i, g_idx[static_cast<size_t>(i)], i, g);
  }
  Int4Weight w = empty_int4(n, k, g);
  for (int64_t r = 0; r < k / 8; ++r)
    for (int64_t col = 0; col < n; ++col) {
      const int32_t word = packed.qweight[static_cast<size_t>(r * n + col)];
      w.qweight[static_cast<size_t>(col * (k / 8) + r)] = word;  // nibble j = row 8r + j in both layouts
    }
  fill_groups(w, packed.scales, [&](int64_t gi, int64_t col) {
    const int stored = nibble(packed.qzeros[static_cast<size_t>(gi * (n / 8) + col / 8)], static_cast<int>(col % 8));
    return v2 ? stored : (stored + 1) & 0xF;
  });
  return w;
}

PackedInt4 pack_awq(const Int4Weight& w) {
  const int64_t n = w.rows, k = w.cols, groups = k / w.group_size;
  PackedInt4 packed;
  packed.qweight.assign(static_cast<size_t>(k * (n / 8)), 0);
  packed.qzeros.assign(static_cast<size_t>(groups * (n / 8)), 0);
  packed.scales.assign(static_cast<size_t>(groups * n), 0.0f);
  ThreadPool::global().parallel_for(k, [&](int64_t first, int64_t last) {  // each input row owns its words
    for (int64_t row_k = first; row_k < last; ++row_k)
      for (int64_t col = 0; col < n; ++col)
        set_nibble(packed.qweight[static_cast<size_t>(row_k * (n / 8) + col / 8)], kAwqSlot[col % 8],
                   q_at(w, col, row_k));
  });
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t col = 0; col < n; ++col) {
      set_nibble(packed.qzeros[static_cast<size_t>(gi * (n / 8) + col / 8)], kAwqSlot[col % 8],
                 w.zeros[static_cast<size_t>(col * groups + gi)]);
      packed.scales[static_cast<size_t>(gi * n + col)] = w.scales[static_cast<size_t>(col * groups + gi)];
    }
  static_assert(kAwqOrder[1] == 2 && kAwqSlot[kAwqOrder[5]] == 5, "the two AWQ tables are inverses");
  return packed;
}

PackedInt4 pack_gptq(const Int4Weight& w, bool v2) {
  const int64_t n = w.rows, k = w.cols, groups = k / w.group_size;
  PackedInt4 packed;
  packed.qweight.assign(static_cast<size_t>((k / 8) * n), 0);
  packed.qzeros.assign(static_cast<size_t>(groups * (n / 8)), 0);
  packed.scales.assign(static_cast<size_t>(groups * n), 0.0f);
  ThreadPool::global().parallel_for(k / 8, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r)
      for (int64_t col = 0; col < n; ++col)
        packed.qweight[static_cast<size_t>(r * n + col)] = w.qweight[static_cast<size_t>(col * (k / 8) + r)];
  });
  for (int64_t gi = 0; gi < groups; ++gi)
    for (int64_t col = 0; col < n; ++col) {
      const int zero = w.zeros[static_cast<size_t>(col * groups + gi)];
      set_nibble(packed.qzeros[static_cast<size_t>(gi * (n / 8) + col / 8)], static_cast<int>(col % 8),
                 v2 ? zero : (zero - 1) & 0xF);
      packed.scales[static_cast<size_t>(gi * n + col)] = w.scales[static_cast<size_t>(col * groups + gi)];
    }
  return packed;
}

Int4Weight quantize_int4(const float* src, int64_t rows, int64_t cols, int64_t g, bool symmetric) {
  CHECK(cols % g == 0 && g % 8 == 0);
  Int4Weight w = empty_int4(rows, cols, g);
  const int64_t groups = cols / g;
  ThreadPool::global().parallel_for(rows, [&](int64_t first_row, int64_t last_row) {
    for (int64_t n = first_row; n < last_row; ++n)
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* x = src + n * cols + gi * g;
        float lo = *std::min_element(x, x + g), hi = *std::max_element(x, x + g);
        float scale;
        int zero;
        if (symmetric) {
          const float amax = std::max(std::fabs(lo), std::fabs(hi));
          scale = round_to_f16(std::max(2.0f * amax / 15.0f, 1e-5f));  // scales are stored as f16
          zero = 8;
        } else {
          lo = std::min(lo, 0.0f);
          hi = std::max(hi, 0.0f);
          scale = round_to_f16(std::max((hi - lo) / 15.0f, 1e-5f));
          zero = std::clamp(static_cast<int>(std::nearbyint(-lo / scale)), 0, 15);
        }
        w.scales[static_cast<size_t>(n * groups + gi)] = scale;
        w.zeros[static_cast<size_t>(n * groups + gi)] = static_cast<uint8_t>(zero);
        for (int64_t i = 0; i < g; ++i) {
          const int q = std::clamp(static_cast<int>(std::nearbyint(x[i] / scale)) + zero, 0, 15);
          const int64_t col = gi * g + i;
          set_nibble(w.qweight[static_cast<size_t>(n * (cols / 8) + col / 8)], static_cast<int>(col % 8), q);
        }
      }
  });
  return w;
}

Fp8BlockWeight quantize_fp8_block(const float* src, int64_t rows, int64_t cols, int64_t bn, int64_t bk) {
  Fp8BlockWeight w;
  w.rows = rows;
  w.cols = cols;
  w.block_n = bn;
  w.block_k = bk;
  const int64_t block_rows = (rows + bn - 1) / bn, block_cols = (cols + bk - 1) / bk;
  w.weight.assign(static_cast<size_t>(rows * cols), 0);
  w.scales.assign(static_cast<size_t>(block_rows * block_cols), 1.0f);
  ThreadPool::global().parallel_for(block_rows, [&](int64_t first_block_row, int64_t last_block_row) {
    for (int64_t br = first_block_row; br < last_block_row; ++br)
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t r_end = std::min(rows, (br + 1) * bn), c_end = std::min(cols, (bc + 1) * bk);
        float amax = 0.0f;
        for (int64_t r = br * bn; r < r_end; ++r)
          for (int64_t c = bc * bk; c < c_end; ++c) amax = std::max(amax, std::fabs(src[r * cols + c]));
        const float scale = amax > 0.0f ? amax / kE4M3Max : 1.0f;
        w.scales[static_cast<size_t>(br * block_cols + bc)] = scale;
        for (int64_t r = br * bn; r < r_end; ++r)
          for (int64_t c = bc * bk; c < c_end; ++c)
            w.weight[static_cast<size_t>(r * cols + c)] = f32_to_e4m3_bits(src[r * cols + c] / scale);
      }
  });
  return w;
}

std::vector<float> dequantize(const Int4Weight& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  const int64_t groups = w.cols / w.group_size;
  for (int64_t n = 0; n < w.rows; ++n)
    for (int64_t k = 0; k < w.cols; ++k) {
      const size_t gi = static_cast<size_t>(n * groups + k / w.group_size);
      out[static_cast<size_t>(n * w.cols + k)] =
          static_cast<float>(q_at(w, n, k) - static_cast<int>(w.zeros[gi])) * w.scales[gi];
    }
  return out;
}

std::vector<float> dequantize(const Fp8BlockWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.rows * w.cols));
  const int64_t block_cols = (w.cols + w.block_k - 1) / w.block_k;
  for (int64_t n = 0; n < w.rows; ++n)
    for (int64_t k = 0; k < w.cols; ++k)
      out[static_cast<size_t>(n * w.cols + k)] =
          e4m3_bits_to_f32(w.weight[static_cast<size_t>(n * w.cols + k)]) *
          w.scales[static_cast<size_t>((n / w.block_n) * block_cols + k / w.block_k)];
  return out;
}

Int4Weight stack_rows(const std::vector<Int4Weight>& parts) {
  CHECK(!parts.empty());
  Int4Weight out;
  out.cols = parts[0].cols;
  out.group_size = parts[0].group_size;
  for (const Int4Weight& p : parts) {
    CHECK(p.cols == out.cols && p.group_size == out.group_size);
    out.rows += p.rows;
    out.qweight.insert(out.qweight.end(), p.qweight.begin(), p.qweight.end());
    out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
    out.zeros.insert(out.zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  return out;
}

Fp8BlockWeight stack_rows(const std::vector<Fp8BlockWeight>& parts) {
  CHECK(!parts.empty());
  Fp8BlockWeight out;
  out.cols = parts[0].cols;
  out.block_k = parts[0].block_k;
  out.block_n = parts[0].block_n;
  bool aligned = true;
  for (const Fp8BlockWeight& p : parts) {
    CHECK(p.cols == out.cols && p.block_k == out.block_k && p.block_n == out.block_n);
    aligned = aligned && (p.rows % p.block_n == 0 || parts.size() == 1);
  }
  if (!aligned) out.block_n = 1;
  const int64_t block_cols = (out.cols + out.block_k - 1) / out.block_k;
  for (const Fp8BlockWeight& p : parts) {
    out.rows += p.rows;
    out.weight.insert(out.weight.end(), p.weight.begin(), p.weight.end());
    if (aligned) {
      out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
      continue;
    }
    for (int64_t r = 0; r < p.rows; ++r) {
      const auto first = p.scales.begin() + (r / p.block_n) * block_cols;
      out.scales.insert(out.scales.end(), first, first + block_cols);
    }
  }
  return out;
}

}  // namespace pagellm
