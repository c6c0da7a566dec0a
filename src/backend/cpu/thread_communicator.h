// The CPU twin of the NCCL communicator: the ranks of a group are threads of one process that see
// each other's tensors. A collective is two barriers: everyone publishes its view, everyone reads all
// views (in rank order, so the sum is the same whatever the threads' timing), then everyone may
// overwrite its own.
#pragma once

#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace pagellm {

// `size` communicators of one group; communicator r is rank r (hand each to the thread running rank r).
std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size);

}  // namespace pagellm
