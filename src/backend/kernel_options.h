// KernelOptions: which kernel a backend runs for an op where it has more than one (the CUDA backend
// today), and whether its decode steps replay CUDA graphs. The defaults are the fast paths; the
// alternatives stay for A/B measurements and for tests that compare the paths. Dispatch reads these
// fields, never the environment: EngineConfig reads the PAGELLM_CUDA_* switches once
// (from_environment) and the engine hands them to every backend it makes; tests set them on their
// backend.
#pragma once

#include <cstdint>

namespace pagellm {

struct KernelOptions {
  bool graphs = true;                   // --enforce-eager, PAGELLM_CUDA_GRAPHS=0: every step launched eagerly
  bool gemv = true;                     // PAGELLM_CUDA_GEMV=0: decode-sized bf16/f16 products on cuBLASLt
  bool quant_gemv = true;               // PAGELLM_CUDA_QUANT_GEMV=0: quantized products dequantized + cuBLASLt
  bool fp8_w8a8 = true;                 // PAGELLM_CUDA_FP8_W8A8=0: FP8 products the GEMV does not take dequantized
  bool decode_attention = true;         // PAGELLM_CUDA_DECODE_ATTENTION=0: decode rows on the general kernel
  bool prefill_attention = true;        // PAGELLM_CUDA_PREFILL_ATTENTION=0: prompt rows on the general kernel
  bool decode_partition_units = false;  // PAGELLM_CUDA_DECODE_PARTITION_UNITS=1: split-KV states per partition
  bool gdn_chunked = true;              // PAGELLM_CUDA_GDN_CHUNKED=0: the delta rule token by token only
  int64_t gdn_chunked_min_tokens = 0;   // PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS=N (>= 1); 0: the kernel's own
  int64_t moe_tiled_min_rows = 0;       // PAGELLM_CUDA_MOE_TILED_MIN_ROWS=N (>= 1): MoE expert products whose
                                        // grouped rows (tile capacity x 8) reach N take the tiled kernel, the
                                        // rest the decode one (the same bits); 0: the kernel's own (above 2,048)
  int64_t moe_k_segments = 0;           // PAGELLM_CUDA_MOE_K_SEGMENTS=N (>= 1): MoE expert products cut K into
                                        // min(N, 2) segments (a pair's bits change with it); 0: the kernels'
                                        // own rule (two from 16 super-steps of 128 on)

  // The defaults with the switches above applied ("0" turns a path off, "1" forces the partitions);
  // a switch set to anything else leaves its default.
  static KernelOptions from_environment();
};

}  // namespace pagellm
