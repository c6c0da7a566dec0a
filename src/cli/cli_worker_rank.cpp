#include "cli/commands.h"
#include "engine/tensor_parallel_worker.h"

namespace pagellm::cli {

bool run_as_tensor_parallel_worker(const EngineConfig& config) {
  if (config.nnodes <= 1 || config.node_rank == 0) return false;
  throw_if_error(run_tensor_parallel_worker(config));
  return true;
}

}  // namespace pagellm::cli
