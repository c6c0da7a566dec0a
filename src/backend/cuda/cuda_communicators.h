// The tensor-parallel collectives of CUDA ranks (backend/communicator.h). Header free of CUDA headers.
//
// - NCCL, for ranks on GPUs of their own: libnccl.so.2 is loaded when a group is made (not linked, so
//   a machine without NCCL still runs everything else), one communicator per rank from ncclCommInitAll,
//   collectives queued on each rank's stream. NVLink multicast (NVLS) stays off unless
//   NCCL_NVLS_ENABLE is set.
// - Ranks sharing one GPU (threads of one process; the multi-rank path tested on a single card): a
//   collective syncs the rank's stream, meets the others, and sums their buffers in rank order with one
//   kernel, so the result does not depend on timing (as the CPU twin).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"

namespace pagellm {

// Communicator r serves ranks[r] (CUDA backends on distinct devices).
Expected<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& ranks);
// Communicator r serves ranks[r] (CUDA backends on one device, each on its own stream).
std::vector<std::unique_ptr<Communicator>> make_same_device_communicators(const std::vector<Backend*>& ranks);

}  // namespace pagellm
