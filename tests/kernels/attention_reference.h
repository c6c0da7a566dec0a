// The naive reference of the varlen paged attention op (backend.h), written independently of every
// kernel: gather each sequence's keys and values from its blocks into dense f64 arrays, then a dense
// masked softmax in f64 per query row and head. Slow on purpose; it is the corner of the test
// triangle that is easiest to read.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace pagellm::reference {

// q: [T, num_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim]
// (any strides, f32/bf16/f16, or f8_e4m3 read as float(stored) * params.kv_scales; host memory);
// params as for Backend::attention.
// Returns out [T, num_heads, head_dim] in f64, row-major. Rows that belong to no sequence, and rows
// that see no key, are zero.
std::vector<double> attention(const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                              const AttentionParams& params);

}  // namespace pagellm::reference
