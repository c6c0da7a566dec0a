#include "engine/tensor_parallel_worker.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/logging.h"
#include "model/model.h"
#include "model/step_wire.h"
#include "model/tensor_parallel_driver.h"

namespace pagellm {

Status check_process_group_flags(const EngineConfig& c) {
  if (c.nnodes < 1 || c.nnodes > 16) return invalid_argument("[engine] --nnodes must be in [1, 16], got {}", c.nnodes);
  if (c.node_rank < 0 || c.node_rank >= c.nnodes)
    return invalid_argument("[engine] --node-rank {} is not in [0, --nnodes {})", c.node_rank, c.nnodes);
  if (c.nnodes > 1 && c.tensor_parallel_size != c.nnodes)
    return invalid_argument("[engine] --nnodes {} runs one rank per process: give --tensor-parallel-size {} too (got {})",
                            c.nnodes, c.nnodes, c.tensor_parallel_size);
  if (c.master_port < 1 || c.master_port > 65535)
    return invalid_argument("[engine] --master-port must be in [1, 65535], got {}", c.master_port);
  if (!(c.tp_timeout_s > 0)) return invalid_argument("[engine] --tp-timeout-s must be > 0, got {}", c.tp_timeout_s);
  return Status::ok();
}

Expected<TcpGroupOptions> process_group_options(const EngineConfig& c) {
  PAGELLM_RETURN_IF_ERROR(check_process_group_flags(c));
  const std::filesystem::path config_json = std::filesystem::path(c.model_dir) / "config.json";
  std::ifstream in(config_json, std::ios::binary);
  if (!in) return invalid_argument("[engine] cannot read {}", config_json.string());
  std::stringstream text;
  text << in.rdbuf();
  text << fmt::format("\ndtype={} quantization={} kv_cache_dtype={} block_size={} tensor_parallel_size={} nnodes={}",
                      c.dtype, c.quantization, c.kv_cache_dtype, c.block_size, c.tensor_parallel_size, c.nnodes);
  TcpGroupOptions options;
  options.rank = c.node_rank;
  options.size = c.nnodes;
  options.master_addr = c.master_addr;
  options.master_port = c.master_port;
  options.timeout_s = c.tp_timeout_s;
  options.fingerprint = fingerprint_of(text.str());
  return options;
}

namespace {

// Receives rank 0's steps and runs each on this rank's shard until rank 0 says stop.
void serve_steps(TcpGroup& group, Model& shard, Backend& backend) {
  std::vector<Tensor> cache_tensors;
  CacheViews caches;
  std::vector<uint8_t> message;
  std::vector<Tensor> inputs;
  while (true) {
    WorkerFrame frame;
    // An idle rank 0 still sends heartbeats: nothing for --tp-timeout-s means it hangs.
    group.recv(0, &frame, sizeof(frame), "waiting for the next step");
    if (frame.message == WorkerMessage::kStop) return;
    if (frame.message == WorkerMessage::kHeartbeat) continue;
    CHECK_MSG(frame.message == WorkerMessage::kStep && frame.bytes < (uint64_t{1} << 34),
              "[tp] rank {}: an unknown frame from rank 0", group.rank());
    message.resize(frame.bytes);
    group.recv(0, message.data(), message.size(), "the step's inputs");
    Expected<DecodedStep> step = decode_step(message);
    CHECK_MSG(step.has_value(), "[tp] rank {}: {}", group.rank(), step.status().message());
    if (step->has_layout) caches = allocate_caches(step->layout, backend, cache_tensors);
    apply_state_slot_inits(backend, step->batch.state_slot_inits, caches);
    // The inputs arrive in host memory; a GPU rank reads its own copies (kept until the next step's
    // copies are queued behind this step's work).
    const StepBatch batch = backend.device() == Device::kCpu ? step->batch : copy_step_inputs(step->batch, backend, inputs);
    shard.forward(batch, caches, TensorView());
  }
}

}  // namespace

Status run_tensor_parallel_worker(const EngineConfig& config) {
  PAGELLM_ASSIGN_OR_RETURN(TcpGroupOptions options, process_group_options(config));
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_process_rank_backend(config.device, config.node_rank));
  backend->set_kernel_options(config.kernel_options);
  PAGELLM_ASSIGN_OR_RETURN(const std::optional<DType> dtype, parse_dtype_flag(config.dtype));
  LOG_INFO("[tp] rank {} of {}: joining rank 0 at {}:{} ({} {})", options.rank, options.size, options.master_addr,
           options.master_port, backend->name(), backend->device_index());
  PAGELLM_ASSIGN_OR_RETURN(std::shared_ptr<TcpGroup> group, TcpGroup::open(options));
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, make_process_communicator(*backend, group));
  backend->set_communicator(std::move(communicator));
  // The backend carries the group's communicator, so the plain load reads this rank's shard.
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Model> shard, load_model(config.model_dir, *backend, dtype, config.quantization));
  PAGELLM_RETURN_IF_ERROR(group->wait_until_all_loaded());
  LOG_INFO("[tp] rank {}: shard loaded; running rank 0's steps", options.rank);
  // Over NCCL rank 0 hears from this rank only through these (tcp_group.h watch_peers).
  if (backend->device() != Device::kCpu) group->start_heartbeats();
  serve_steps(*group, *shard, *backend);
  group->stop_heartbeats();
  LOG_INFO("[tp] rank {}: rank 0 stopped the group", options.rank);
  return Status::ok();
}

}  // namespace pagellm
