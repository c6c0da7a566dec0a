#include "engine/engine_config.h"

namespace pagellm {

void add_engine_options(CLI::App& command, EngineConfig& config) {
  command.add_option("--device", config.device, "cpu or cuda")->capture_default_str();
  command.add_option("--max-num-seqs", config.max_num_seqs, "requests running at once at most")->capture_default_str();
  command.add_option("--max-num-batched-tokens", config.max_num_batched_tokens, "tokens per engine step at most")
      ->capture_default_str();
  command.add_option("--block-size", config.block_size, "tokens per KV cache block")->capture_default_str();
  command.add_option("--max-model-len", config.max_model_len, "prompt + output tokens at most (0 = model's limit)")
      ->capture_default_str();
  command.add_option("--kv-cache-memory", config.kv_cache_memory_bytes,
                     "bytes for the KV cache (0 = a fraction of free memory)")->capture_default_str();
  command.add_option("--gpu-memory-utilization", config.gpu_memory_utilization,
                     "fraction of the GPU memory free after the weights and a measured activation step that the KV cache takes")->capture_default_str();
  command.add_flag("--no-enable-prefix-caching{false},--enable-prefix-caching{true}", config.enable_prefix_caching,
                   "automatic prefix caching (on by default)");
  command.add_flag("--async-scheduling{1},--no-async-scheduling{0}", config.async_scheduling,
                   "plan each step while the previous one runs (default: on for cuda, off for cpu)");
  command.add_option("--long-prefill-token-threshold", config.long_prefill_token_threshold,
                     "at most this many prompt tokens per request per step (0 = off)")->capture_default_str();
}

}  // namespace pagellm
