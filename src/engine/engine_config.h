// EngineConfig: the engine flags shared by generate, serve and the benchmarks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "backend/kernel_options.h"
#include "core/dtype.h"
#include "core/status.h"
#include "engine/speculative_config.h"

namespace pagellm {

struct EngineConfig {
  std::string model_dir;
  std::string tokenizer_dir;  // "": the model's folder
  std::string device = "auto";  // "auto": cuda when built with it and a GPU is there, else cpu
  std::string dtype = "auto";   // activation dtype: "auto" (config.json's), bfloat16, float16, float32
  std::optional<uint64_t> seed;  // the stream of seeds drawn for requests that bring none
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int block_size = 16;
  int max_model_len = 0;              // 0: the model's max_position_embeddings, capped by the cache
  int64_t kv_cache_memory_bytes = 0;  // 0: a fraction of the memory free after loading the weights
  // The paged KV cache's element type (vLLM's names): auto (the activation dtype), bfloat16 / float16 /
  // float32 (when that is the activation dtype), fp8 = fp8_e4m3 (half the bytes of bf16 per block,
  // with the checkpoint's per-layer k_scale / v_scale, else 1.0).
  std::string kv_cache_dtype = "auto";
  // --quantization: "" keeps the checkpoint's; fp8 / awq / gptq must match it, except fp8 on an
  // unquantized checkpoint, whose projections are quantized at load.
  std::string quantization;
  int tensor_parallel_size = 1;  // ranks one model is split over (model/tensor_parallel_model.h)
  // CUDA ranks all on one GPU (no flag: the tests run the multi-rank path on a single card this way).
  bool tensor_parallel_share_device = false;
  // --tp-communicator: how CUDA ranks on GPUs of their own meet: auto (peer memory where every pair of
  // GPUs has it, else NCCL), peer, nccl.
  std::string tp_communicator = "auto";
  // Which kernels run where a backend has a choice: the PAGELLM_CUDA_* switches of the environment,
  // read here once (backend/kernel_options.h); the engine gives them to every backend it makes.
  KernelOptions kernel_options = KernelOptions::from_environment();
  // Ranks as processes, one each (vLLM / torchrun's flags; engine/tensor_parallel_worker.h): --nnodes
  // equal to --tensor-parallel-size, this process's --node-rank (0 runs the engine and the server,
  // the others only their shard), rank 0's --master-addr / --master-port, and --tp-timeout-s, how
  // long a rank waits in a step for the others before it ends with an error.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double tp_timeout_s = 60.0;
  double gpu_memory_utilization = 0.9;   // that fraction on a GPU, after weights and measured activations
                                         // (the CPU takes 25%, at most 4 GiB)
  bool enable_prefix_caching = true;
  // Hybrid (GDN) models' prefix cache: a GDN state checkpoint every this many blocks of a prompt
  // (0 = the fewest blocks that make a multiple of the 64-token GDN chunk: 4 of 16 tokens). The
  // engine sets num_state_checkpoints from the memory budget (engine/state_memory.h).
  int hybrid_checkpoint_interval_blocks = 0;
  int num_state_checkpoints = 0;
  int max_waiting = 4096;             // submitted but unfinished requests at most (then 429)
  int long_prefill_token_threshold = 0;
  // Concurrent partial prefills (sched/scheduler.h; vLLM's flags, 0 = no limit).
  int max_num_partial_prefills = 0;
  int max_long_partial_prefills = 0;
  // Plan step N+1 while step N runs on the device (1), or commit each step first (0); -1: on for
  // GPUs, off on the CPU (whose steps run inline: planning ahead would only delay each token).
  int async_scheduling = -1;
  // --speculative-config: n-gram or draft-model speculative decoding (off by default).
  SpeculativeConfig speculative;
};

// Adds --max-num-seqs, --max-num-batched-tokens, --block-size, --kv-cache-memory, --max-model-len
// (vLLM's 32k / 1m / 1M forms too), --kv-cache-dtype, --no-enable-prefix-caching, --device, --dtype, --tokenizer, --seed
// (unless the command already has one), --[no-]async-scheduling, --speculative-config to a command.
void add_engine_options(CLI::App& command, EngineConfig& config);
// The cache dtype --kv-cache-dtype names for a model of `activation_dtype`, or a one-line error naming
// the value ("[engine] --kv-cache-dtype 'fp8_e5m2' is not one of ...").
Expected<DType> resolve_kv_cache_dtype(const std::string& name, DType activation_dtype);
// Only whether the name is one of the accepted values (checked before a model is loaded).
Status check_kv_cache_dtype_name(const std::string& name);
// --dtype: nullopt for auto (config.json's), else the dtype; a one-line error for other names.
Expected<std::optional<DType>> parse_dtype_flag(const std::string& name);
// "32k" -> "32000", "32K" -> "32768", "1m" -> "1000000", "1M" -> "1048576"; other text unchanged.
std::string expand_token_count(const std::string& text);

}  // namespace pagellm
