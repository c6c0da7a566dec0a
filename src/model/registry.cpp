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
#include "model/tensor_parallel_model.h"
#include "backend/cpu/thread_communicator.h"

namespace pagellm {

namespace {

using Factory = std::function<Expected<std::unique_ptr<Model>>(const ModelConfig&, const Checkpoint&, Backend&)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = {
      {"Qwen3ForCausalLM", make_qwen3},
      {"Qwen3MoeForCausalLM", make_qwen3_moe},
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
                                             const Factory& factory, int size) {
  if (backend.device() != Device::kCpu)
    return unimplemented("[model] --tensor-parallel-size {} on {}: this build runs tensor parallelism on the CPU only "
                         "(ranks as threads); the NCCL group of GPUs is not built yet",
                         size, backend.name());
  for (LayerType t : config.layer_types)
    if (t == LayerType::kLinearAttention)
      return unimplemented("[model] {}: tensor parallelism over Gated DeltaNet layers is not supported yet",
                           config.architecture);
  std::vector<std::unique_ptr<Communicator>> communicators = make_thread_communicators(size);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::unique_ptr<Model>> ranks;
  backend.set_communicator(std::move(communicators[0]));
  for (int rank = 0; rank < size; ++rank) {
    Backend* rank_backend = &backend;
    if (rank > 0) {
      PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> made, make_backend(backend.name()));
      made->set_communicator(std::move(communicators[static_cast<size_t>(rank)]));
      rank_backend = made.get();
      backends.push_back(std::move(made));
    }
    Expected<std::unique_ptr<Model>> shard = factory(config, checkpoint, *rank_backend);
    if (!shard.has_value()) {
      backend.set_communicator(nullptr);
      return shard.status();
    }
    ranks.push_back(std::move(shard).value());
  }
  LOG_INFO("[model] {}: tensor parallel over {} ranks ({} threads, one CPU communicator)", config.architecture, size,
           size);
  return std::unique_ptr<Model>(std::make_unique<TensorParallelModel>(std::move(ranks), std::move(backends)));
}

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories()) names.push_back(name);
  return names;
}

Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, Backend& backend, std::optional<DType> dtype,
                                            const std::string& quantization, int tensor_parallel_size) {
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    return invalid_argument("[model] --tensor-parallel-size must be in [1, 64], got {}", tensor_parallel_size);
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
  if (tensor_parallel_size > 1) return load_shards(config, checkpoint, backend, it->second, tensor_parallel_size);
  return it->second(config, checkpoint, backend);
}

}  // namespace pagellm
