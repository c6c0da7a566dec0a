// The only place that knows which backends were built (PAGELLM_CUDA).
#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/thread_communicator.h"

#ifdef PAGELLM_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_communicators.h"
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

Expected<std::vector<std::unique_ptr<Backend>>> make_tensor_parallel_group(Backend& rank0, int size,
                                                                          bool share_device) {
  std::vector<std::unique_ptr<Backend>> others;
  std::vector<Backend*> ranks{&rank0};
  const bool cuda = rank0.device() == Device::kCuda;
#ifdef PAGELLM_CUDA
  if (cuda && !share_device && cuda_device_count() < size)
    return invalid_argument("[backend] --tensor-parallel-size {} needs {} GPUs; this process sees {}", size, size,
                            cuda_device_count());
#endif
  for (int rank = 1; rank < size; ++rank) {
    Expected<std::unique_ptr<Backend>> made = make_backend("cpu");
#ifdef PAGELLM_CUDA
    if (cuda) made = make_cuda_backend(share_device ? 0 : rank);
#endif
    if (!made.has_value()) return made.status();
    ranks.push_back(made.value().get());
    others.push_back(std::move(made).value());
  }
  std::vector<std::unique_ptr<Communicator>> communicators;
  if (!cuda) {
    communicators = make_thread_communicators(size);
  } else {
#ifdef PAGELLM_CUDA
    if (share_device) {
      communicators = make_same_device_communicators(ranks);
    } else {
      PAGELLM_ASSIGN_OR_RETURN(communicators, make_nccl_communicators(ranks));
    }
#endif
  }
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r]->set_communicator(std::move(communicators[r]));
  return others;
}

}  // namespace pagellm
