// "architectures" in config.json -> the factory that builds that model.
#include <filesystem>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "core/logging.h"
#include "io/hf_config.h"
#include "model/decoder.h"
#include "model/model.h"
#include "model/qwen3.h"
#include "model/qwen35.h"
#include "model/tensor_parallel_driver.h"
#include "model/tensor_parallel_model.h"

namespace pagellm {

namespace {

using Factory = std::function<Expected<std::unique_ptr<Model>>(const ModelConfig&, const Checkpoint&, Backend&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = {
      {"Qwen3ForCausalLM", make_qwen3},
      {"Qwen3MoeForCausalLM", make_qwen3_moe},
      {"GptOssForCausalLM", make_gpt_oss},
      {"LlamaForCausalLM", make_llama},
      {"MistralForCausalLM", make_mistral},
      {"Qwen2ForCausalLM", make_qwen2},
      {"Gemma2ForCausalLM", make_gemma2},
      {"Gemma3ForCausalLM", make_gemma3},
      {"Gemma3ForConditionalGeneration", make_gemma3},  // the text model; vision tower ignored
      {"Qwen3_5ForCausalLM", make_qwen35},
      {"Qwen3_5ForConditionalGeneration", make_qwen35},  // the text model; vision tower ignored
      {"Qwen3NextForCausalLM", make_qwen35},
  };
  return table;
}

// Loads one shard per rank, each on a backend of its own with its communicator (rank 0 on `backend`).
Expected<std::unique_ptr<Model>> load_shards(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend,
                                             const Factory& factory, const TensorParallelOptions& tp) {
  PAGELLM_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<Backend>> backends,
                           make_tensor_parallel_group(backend, tp.size, tp.share_device, tp.communicator));
  std::vector<std::unique_ptr<Model>> ranks;
  for (int rank = 0; rank < tp.size; ++rank) {
    Backend& rank_backend = rank == 0 ? backend : *backends[static_cast<size_t>(rank) - 1];
    rank_backend.make_current();
    Expected<std::unique_ptr<Model>> shard = factory(config, checkpoint, rank_backend);
    backend.make_current();
    if (!shard.has_value()) {
      backend.set_communicator(nullptr);
      return shard.status();
    }
    ranks.push_back(std::move(shard).value());
  }
  LOG_INFO("[model] {}: tensor parallel over {} {} ranks{}", config.architecture, tp.size, backend.name(),
           tp.share_device ? " sharing one device" : "");
  return std::unique_ptr<Model>(std::make_unique<TensorParallelModel>(backend, std::move(ranks), std::move(backends)));
}

// Rank 0 of a group of processes: forms the group (the others join it), loads its shard, waits until
// every rank has loaded its own.
Expected<std::unique_ptr<Model>> load_driver(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend,
                                             const Factory& factory, const TcpGroupOptions& options) {
  PAGELLM_ASSIGN_OR_RETURN(std::shared_ptr<TcpGroup> group, TcpGroup::open(options));
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, make_process_communicator(backend, group));
  backend.set_communicator(std::move(communicator));
  Expected<std::unique_ptr<Model>> shard = factory(config, checkpoint, backend);
  if (!shard.has_value()) {
    backend.set_communicator(nullptr);
    return shard.status();  // the workers see the connection close and end
  }
  PAGELLM_RETURN_IF_ERROR(group->wait_until_all_loaded());
  LOG_INFO("[model] {}: tensor parallel over {} processes (this one rank 0)", config.architecture, options.size);
  return std::unique_ptr<Model>(std::make_unique<TensorParallelDriver>(backend, std::move(shard).value(), group));
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories()) names.push_back(name);
  return names;
}

Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, Backend& backend, std::optional<DType> dtype,
                                            const std::string& quantization, TensorParallelOptions tp) {
  if (tp.size < 1 || tp.size > 16)
    return invalid_argument("[model] --tensor-parallel-size must be in [1, 16], got {}", tp.size);
  const std::string config_path = (std::filesystem::path(model_dir) / "config.json").string();
  PAGELLM_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(config_path));
  if (dtype) config.dtype = *dtype;
  PAGELLM_ASSIGN_OR_RETURN(config.quantization, apply_quantization_flag(config.quantization, quantization));
  const auto it = factories().find(config.architecture);
  if (it == factories().end())
    return unimplemented("[model] architecture '{}' is not supported; supported: {}", config.architecture,
                         fmt::join(supported_architectures(), ", "));
  PAGELLM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open_dir(model_dir));
  if (config.quantization.enabled())
    LOG_INFO("[model] {}: projections quantized as {}", config.architecture, config.quantization.describe());
  if (tp.processes) return load_driver(config, checkpoint, backend, it->second, *tp.processes);
  if (tp.size > 1) return load_shards(config, checkpoint, backend, it->second, tp);
  return it->second(config, checkpoint, backend);
}

}  // namespace pagellm
