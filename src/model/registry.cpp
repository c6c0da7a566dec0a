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

}  // namespace

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : factories()) names.push_back(name);
  return names;
}

Expected<std::unique_ptr<Model>> load_model(const std::string& model_dir, Backend& backend, std::optional<DType> dtype,
                                            const std::string& quantization) {
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
  return it->second(config, checkpoint, backend);
}

}  // namespace pagellm
