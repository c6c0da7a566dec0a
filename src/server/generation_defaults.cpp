#include "server/generation_defaults.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

namespace pagellm::server {

namespace {

template <typename T>
void read_number(const nlohmann::json& config, const char* key, std::optional<T>& out) {
  const auto it = config.find(key);
  if (it != config.end() && it->is_number()) out = it->get<T>();
}

}  // namespace

std::string GenerationDefaults::describe() const {
  std::vector<std::string> parts;
  if (temperature) parts.push_back(fmt::format("temperature={}", *temperature));
  if (top_p) parts.push_back(fmt::format("top_p={}", *top_p));
  if (top_k) parts.push_back(fmt::format("top_k={}", *top_k));
  if (min_p) parts.push_back(fmt::format("min_p={}", *min_p));
  if (repetition_penalty) parts.push_back(fmt::format("repetition_penalty={}", *repetition_penalty));
  if (max_tokens) parts.push_back(fmt::format("max_tokens={}", *max_tokens));
  return fmt::format("{}", fmt::join(parts, ", "));
}

Expected<GenerationDefaults> load_generation_defaults(const std::string& setting, const std::string& model_dir) {
  if (setting == "vllm") return GenerationDefaults{};
  const std::filesystem::path path =
      std::filesystem::path(setting == "auto" ? model_dir : setting) / "generation_config.json";
  if (!std::filesystem::exists(path)) {
    if (setting == "auto") return GenerationDefaults{};
    return not_found("[serve] --generation-config {}: no generation_config.json there", setting);
  }
  std::ifstream in(path);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return invalid_argument("[serve] {} is not a JSON object", path.string());
  GenerationDefaults defaults;
  // transformers: do_sample false means greedy whatever the temperature says.
  const auto do_sample = config.find("do_sample");
  if (do_sample != config.end() && do_sample->is_boolean() && !do_sample->get<bool>()) {
    defaults.temperature = 0.0;
  } else {
    read_number(config, "temperature", defaults.temperature);
  }
  read_number(config, "top_p", defaults.top_p);
  read_number(config, "top_k", defaults.top_k);
  read_number(config, "min_p", defaults.min_p);
  read_number(config, "repetition_penalty", defaults.repetition_penalty);
  read_number(config, "max_new_tokens", defaults.max_tokens);
  return defaults;
}

void apply_generation_defaults(const nlohmann::ordered_json& body, const GenerationDefaults& defaults,
                               CommonFields& common) {
  auto absent = [&](const char* key) { return !body.contains(key) || body[key].is_null(); };
  SamplingParams& s = common.sampling;
  if (defaults.temperature && absent("temperature")) s.temperature = static_cast<float>(*defaults.temperature);
  if (defaults.top_p && absent("top_p")) s.top_p = static_cast<float>(*defaults.top_p);
  if (defaults.top_k && absent("top_k")) s.top_k = *defaults.top_k;
  if (defaults.min_p && absent("min_p")) s.min_p = static_cast<float>(*defaults.min_p);
  if (defaults.repetition_penalty && absent("repetition_penalty"))
    s.repetition_penalty = static_cast<float>(*defaults.repetition_penalty);
  if (defaults.max_tokens && !common.max_tokens) common.max_tokens = *defaults.max_tokens;
}

}  // namespace pagellm::server
