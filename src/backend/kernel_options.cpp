#include "backend/kernel_options.h"

#include <cstdlib>
#include <string_view>

namespace pagellm {
namespace {

bool switched(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set != nullptr && value == set;
}

// A whole number >= 1 in `name`, or 0 (unset, or anything else).
int64_t positive_number(const char* name) {
  const char* set = std::getenv(name);
  if (set == nullptr) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(set, &end, 10);
  return end != set && *end == '\0' && n >= 1 ? static_cast<int64_t>(n) : 0;
}

}  // namespace

KernelOptions KernelOptions::from_environment() {
  KernelOptions options;
  options.graphs = !switched("PAGELLM_CUDA_GRAPHS", "0");
  options.gemv = !switched("PAGELLM_CUDA_GEMV", "0");
  options.quant_gemv = !switched("PAGELLM_CUDA_QUANT_GEMV", "0");
  options.fp8_w8a8 = !switched("PAGELLM_CUDA_FP8_W8A8", "0");
  options.decode_attention = !switched("PAGELLM_CUDA_DECODE_ATTENTION", "0");
  options.prefill_attention = !switched("PAGELLM_CUDA_PREFILL_ATTENTION", "0");
  options.decode_partition_units = switched("PAGELLM_CUDA_DECODE_PARTITION_UNITS", "1");
  options.gdn_chunked = !switched("PAGELLM_CUDA_GDN_CHUNKED", "0");
  options.gdn_chunked_min_tokens = positive_number("PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS");
  options.moe_tiled_min_rows = positive_number("PAGELLM_CUDA_MOE_TILED_MIN_ROWS");
  options.moe_k_segments = positive_number("PAGELLM_CUDA_MOE_K_SEGMENTS");
  return options;
}

}  // namespace pagellm
