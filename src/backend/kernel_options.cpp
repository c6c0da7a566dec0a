#include "backend/kernel_options.h"

#include <cstdlib>
#include <string_view>

namespace pagellm {
namespace {

bool switched(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set != nullptr && value == set;
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
  if (const char* min_tokens = std::getenv("PAGELLM_CUDA_GDN_CHUNKED_MIN_TOKENS")) {
    char* end = nullptr;
    const long long n = std::strtoll(min_tokens, &end, 10);
    if (end != min_tokens && *end == '\0' && n >= 1) options.gdn_chunked_min_tokens = static_cast<int64_t>(n);
  }
  return options;
}

}  // namespace pagellm
