// The only place that knows which backends were built (PAGELLM_CUDA).
#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

#ifdef PAGELLM_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace pagellm {

std::vector<std::string> available_backends() {
#ifdef PAGELLM_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

Expected<std::unique_ptr<Backend>> make_backend(const std::string& device) {
  if (device == "auto") {  // as vLLM: the GPU when there is one
#ifdef PAGELLM_CUDA
    auto cuda = make_cuda_backend();
    if (cuda.has_value()) return cuda;
#endif
    return make_backend("cpu");
  }
  if (device == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>());
#ifdef PAGELLM_CUDA
  if (device == "cuda") return make_cuda_backend();
#else
  if (device == "cuda")
    return unimplemented("[backend] this pagellm was built without CUDA (no nvcc at build time); use --device cpu");
#endif
  return invalid_argument("[backend] unknown device '{}': expected one of {}", device,
                          fmt::join(available_backends(), ", "));
}

}  // namespace pagellm
