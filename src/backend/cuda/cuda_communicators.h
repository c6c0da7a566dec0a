// The tensor-parallel collectives of CUDA ranks (backend/communicator.h). Header free of CUDA headers.
//
// - Peer memory, for ranks on GPUs of their own in this process (the default): one kernel per
//   collective that reads the other GPUs' staging buffers over NVLink / PCIe, summing in rank order
//   (the same bits as the same-device group and the CPU twin), capturable in CUDA graphs.
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

class TcpGroup;

// Communicator r serves ranks[r] (CUDA backends on distinct devices of this process that reach each
// other's memory): peer_collectives.h's kernels, the same-device group's sums, capturable in graphs.
// An error when a pair of the GPUs has no peer access.
Expected<std::vector<std::unique_ptr<Communicator>>> make_peer_communicators(const std::vector<Backend*>& ranks);
// Communicator r serves ranks[r] (CUDA backends on distinct devices).
Expected<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& ranks);
// This process's rank of a group of processes (--nnodes), on `backend`'s GPU: NCCL over the group's
// rank 0 (its id travels over the TCP group; NVLink, PCIe, shared memory or sockets, as NCCL finds).
Expected<std::unique_ptr<Communicator>> make_nccl_process_communicator(Backend& backend, TcpGroup& group);
// Communicator r serves ranks[r] (CUDA backends on one device, each on its own stream).
std::vector<std::unique_ptr<Communicator>> make_same_device_communicators(const std::vector<Backend*>& ranks);

}  // namespace pagellm
