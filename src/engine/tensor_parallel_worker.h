// A rank > 0 of a tensor-parallel group of processes (--nnodes N --node-rank R, R > 0): it joins rank
// 0's group (backend/tcp_group.h), loads its shard (on the CPU, or on GPU node rank % visible GPUs with NCCL
// collectives), then runs each step rank 0's
// TensorParallelDriver sends (model/tensor_parallel_driver.h) on its own copy of the caches, until
// rank 0 stops it. It has no scheduler, server or tokenizer: serve, generate and the benchmarks
// started with --node-rank > 0 run this instead.
#pragma once

#include "backend/tcp_group.h"
#include "engine/engine_config.h"

namespace pagellm {

// The flags' one-line errors (--nnodes, --node-rank, --master-port, --tp-timeout-s).
Status check_process_group_flags(const EngineConfig& config);
// The group options of this process; the fingerprint covers config.json and the flags that shape a
// shard (--dtype, --quantization, --kv-cache-dtype, --block-size, --tensor-parallel-size, --nnodes).
Expected<TcpGroupOptions> process_group_options(const EngineConfig& config);

// Runs this worker until rank 0 stops it (ok) or the group cannot form or a shard cannot load (an
// error). A peer lost mid-step ends the process (tcp_group.h).
Status run_tensor_parallel_worker(const EngineConfig& config);

}  // namespace pagellm
