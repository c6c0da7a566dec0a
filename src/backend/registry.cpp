// The only place that knows which backends were built (PAGELLM_CUDA).
#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/tcp_communicator.h"
#include "backend/cpu/thread_communicator.h"
#include "core/logging.h"

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

Expected<std::unique_ptr<Backend>> make_process_rank_backend(const std::string& device, int rank) {
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(device));
#ifdef PAGELLM_CUDA
  if (backend->device() == Device::kCuda && rank % cuda_device_count() != 0)
    return make_cuda_backend(rank % cuda_device_count());
#endif
  return backend;
}

Expected<std::unique_ptr<Communicator>> make_process_communicator(Backend& backend,
                                                                  const std::shared_ptr<TcpGroup>& group) {
#ifdef PAGELLM_CUDA
  if (backend.device() == Device::kCuda) return make_nccl_process_communicator(backend, *group);
#endif
  return make_tcp_communicator(group);
}

Expected<std::vector<std::unique_ptr<Backend>>> make_tensor_parallel_group(Backend& rank0, int size,
                                                                          bool share_device,
                                                                          const std::string& communicator) {
  if (communicator != "auto" && communicator != "peer" && communicator != "nccl")
    return invalid_argument("[backend] --tp-communicator must be auto, peer or nccl, got '{}'", communicator);
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
    made.value()->set_kernel_options(rank0.kernel_options());  // every rank runs the same kernels
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
    } else if (communicator == "nccl") {
      PAGELLM_ASSIGN_OR_RETURN(communicators, make_nccl_communicators(ranks));
    } else {
      Expected<std::vector<std::unique_ptr<Communicator>>> peer = make_peer_communicators(ranks);
      if (!peer.has_value() && communicator == "peer") return peer.status();
      if (!peer.has_value()) {
        LOG_INFO("[backend] {}; the ranks meet over NCCL", peer.status().message());
        PAGELLM_ASSIGN_OR_RETURN(communicators, make_nccl_communicators(ranks));
      } else {
        communicators = std::move(peer).value();
      }
    }
#endif
  }
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r]->set_communicator(std::move(communicators[r]));
  return others;
}

}  // namespace pagellm
