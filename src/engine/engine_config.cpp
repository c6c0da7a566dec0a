#include "engine/engine_config.h"

#include <cstdlib>
#include <stdexcept>

namespace pagellm {

// vLLM's human-readable lengths: k / m multiply by 1000 / 10^6, K / M by 1024 / 2^20.
std::string expand_token_count(const std::string& text) {
  if (text.empty()) return text;
  const char suffix = text.back();
  int64_t multiplier = 0;
  if (suffix == 'k') multiplier = 1000;
  if (suffix == 'K') multiplier = 1024;
  if (suffix == 'm') multiplier = 1000000;
  if (suffix == 'M') multiplier = 1 << 20;
  if (multiplier == 0) return text;
  const std::string number = text.substr(0, text.size() - 1);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || !(value > 0))
    throw CLI::ValidationError("--max-model-len", "'" + text + "' is not a length such as 4096, 32k or 1M");
  return std::to_string(static_cast<int64_t>(value * static_cast<double>(multiplier)));
}

namespace {
constexpr const char* kKvCacheDtypes = "auto, bfloat16, float16, float32, fp8, fp8_e4m3";
}  // namespace

Expected<std::optional<DType>> parse_dtype_flag(const std::string& name) {
  if (name == "auto") return std::optional<DType>();
  DType parsed;
  if (!parse_dtype(name, &parsed))
    return invalid_argument("[engine] --dtype '{}' is not one of auto, bfloat16, float16, float32", name);
  return std::optional<DType>(parsed);
}

Status check_kv_cache_dtype_name(const std::string& name) {
  for (const char* known : {"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3"}) {
    if (name == known) return Status::ok();
  }
  return invalid_argument("[engine] --kv-cache-dtype '{}' is not one of {}", name, kKvCacheDtypes);
}

Expected<DType> resolve_kv_cache_dtype(const std::string& name, DType activation_dtype) {
  PAGELLM_RETURN_IF_ERROR(check_kv_cache_dtype_name(name));
  if (name == "auto") return activation_dtype;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kF8E4M3;
  DType wanted = DType::kF32;
  parse_dtype(name, &wanted);
  // Float caches hold k and v exactly as the attention computed them; another float dtype would
  // need a conversion in every kernel for no saving that fp8 does not give better.
  if (wanted != activation_dtype)
    return invalid_argument("[engine] --kv-cache-dtype '{}' differs from the activation dtype {}: use auto or fp8", name,
                            dtype_name(activation_dtype));
  return wanted;
}

void add_engine_options(CLI::App& command, EngineConfig& config) {
  command.add_option("--device", config.device, "auto (cuda when a GPU is there), cpu or cuda")->capture_default_str();
  command.add_option("--dtype", config.dtype, "activation dtype: auto (config.json's), bfloat16, float16, float32")
      ->capture_default_str();
  command.add_option("--tokenizer", config.tokenizer_dir, "tokenizer folder (default: the model's)");
  // Commands with a --seed of their own (generate: the sampling seed; benchmarks: the dataset's) keep it.
  if (command.get_option_no_throw("--seed") == nullptr)
    command.add_option("--seed", config.seed, "seed of the seeds drawn for requests that bring none (reproducible runs)");
  command.add_option("--max-num-seqs", config.max_num_seqs, "requests running at once at most")->capture_default_str();
  command.add_option("--max-num-batched-tokens", config.max_num_batched_tokens, "tokens per engine step at most")
      ->capture_default_str();
  command.add_option("--block-size", config.block_size, "tokens per KV cache block")->capture_default_str();
  command.add_option("--max-model-len", config.max_model_len,
                     "prompt + output tokens at most (0 = model's limit); 32k = 32000, 32K = 32768, 1m, 1M")
      ->capture_default_str()
      ->transform([](std::string text) { return expand_token_count(text); });
  command.add_option("--kv-cache-dtype", config.kv_cache_dtype,
                     "KV cache dtype: auto (the activation dtype), bfloat16, float16, float32, fp8 / fp8_e4m3 "
                     "(half the bytes per block; the checkpoint's k_scale / v_scale, else 1.0)")
      ->capture_default_str();
  command.add_option("--quantization,-q", config.quantization,
                     "fp8, awq or gptq: must match the checkpoint's quantization_config, except fp8 on an unquantized "
                     "checkpoint, which quantizes its projections at load (128x128 blocks)");
  command.add_option("--tensor-parallel-size", config.tensor_parallel_size,
                     "split the model over this many ranks (heads, columns and vocabulary; one all-reduce after "
                     "attention and after the MLP); on the CPU the ranks are threads")
      ->capture_default_str();
  command.add_option("--tp-communicator", config.tp_communicator,
                     "collectives of CUDA ranks on GPUs of one process: auto (peer memory when every pair of GPUs "
                     "reaches the other's, else NCCL), peer (one kernel per collective over NVLink / PCIe, summing "
                     "in rank order, captured in the decode steps' CUDA graphs), nccl")
      ->check(CLI::IsMember({"auto", "peer", "nccl"}))
      ->capture_default_str();
  command.add_option("--nnodes", config.nnodes,
                     "processes the model is split over, one rank each (= --tensor-parallel-size; on CUDA a GPU each: "
                     "node rank % visible GPUs, NCCL between them), "
                     "on one host or several")
      ->capture_default_str();
  command.add_option("--node-rank", config.node_rank,
                     "this process's rank among --nnodes: 0 runs the engine (and the server), the others their shard")
      ->capture_default_str();
  command.add_option("--master-addr", config.master_addr, "the address of the --node-rank 0 process")
      ->capture_default_str();
  command.add_option("--master-port", config.master_port, "the port --node-rank 0 listens on for the other ranks")
      ->capture_default_str();
  command.add_option("--tp-timeout-s", config.tp_timeout_s,
                     "--nnodes > 1: seconds a rank waits in a step for the others before it ends with an error")
      ->capture_default_str();
  command.add_option("--kv-cache-memory", config.kv_cache_memory_bytes,
                     "bytes for the KV cache (0 = a fraction of free memory)")->capture_default_str();
  command.add_option("--gpu-memory-utilization", config.gpu_memory_utilization,
                     "fraction of the GPU memory free after the weights and a measured activation step that the KV cache takes")->capture_default_str();
  command.add_flag("--no-enable-prefix-caching{false},--enable-prefix-caching{true}", config.enable_prefix_caching,
                   "automatic prefix caching (on by default, hybrid models included)");
  command.add_option("--hybrid-checkpoint-interval-blocks", config.hybrid_checkpoint_interval_blocks,
                     "hybrid (Gated DeltaNet) models: cache the recurrent state every this many KV blocks of a prompt "
                     "(blocks x block size a multiple of 64; 0 = the fewest such blocks)")
      ->capture_default_str();
  command.add_flag_callback("--enforce-eager", [&config] { config.kernel_options.graphs = false; },
                            "launch every step eagerly: no CUDA graphs for decode steps (also PAGELLM_CUDA_GRAPHS=0)");
  command.add_flag("--async-scheduling{1},--no-async-scheduling{0}", config.async_scheduling,
                   "plan each step while the previous one runs (default: on for cuda, off for cpu)");
  command.add_option("--long-prefill-token-threshold", config.long_prefill_token_threshold,
                     "at most this many prompt tokens per request per step, and the length past which a prompt "
                     "is long for --max-long-partial-prefills (0 = off)")->capture_default_str();
  command.add_option("--max-num-partial-prefills", config.max_num_partial_prefills,
                     "prompts a step may leave unfinished at most (0 = no limit); above 1 (or with "
                     "--max-long-partial-prefills) and no --long-prefill-token-threshold, that threshold becomes 4% of "
                     "max_model_len")->capture_default_str();
  command.add_option("--max-long-partial-prefills", config.max_long_partial_prefills,
                     "of those, long prompts at most (0 = no limit): while that many are unfinished, shorter "
                     "prompts start ahead of waiting long ones")->capture_default_str();
  command
      .add_option_function<std::string>(
          "--speculative-config",
          [&config](const std::string& text) {
            Expected<SpeculativeConfig> parsed = parse_speculative_config(text);
            // A one-line "error: ..." from main, as the other bad-input errors of the commands.
            if (!parsed.has_value()) throw std::invalid_argument(parsed.status().message());
            config.speculative = *parsed;
          },
          "speculative decoding as JSON, vLLM's keys: {\"method\": \"ngram\", \"num_speculative_tokens\": 3, "
          "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}, {\"model\": DRAFT_DIR, \"num_speculative_tokens\": 3} "
          "or {\"method\": \"mtp\", \"num_speculative_tokens\": 2} (the checkpoint's MTP head)")
      ->type_name("JSON");
}

}  // namespace pagellm
