#include "engine/speculative_config.h"

#include <nlohmann/json.hpp>

namespace pagellm {

namespace {
using Json = nlohmann::json;

Expected<int> integer_field(const Json& root, const char* key, int fallback) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return invalid_argument("[speculative-config] {} must be an integer, got {}", key, it->dump());
  const int64_t value = it->get<int64_t>();
  if (value < -1'000'000 || value > 1'000'000) return invalid_argument("[speculative-config] {} = {} is out of range", key, value);
  return static_cast<int>(value);
}

Status check_keys(const Json& root) {
  static constexpr const char* kKnown[] = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                                          "prompt_lookup_min"};
  for (const auto& [key, value] : root.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known)
      return invalid_argument("[speculative-config] unknown key '{}' (known: method, model, num_speculative_tokens, "
                              "prompt_lookup_max, prompt_lookup_min)", key);
  }
  return Status::ok();
}

Expected<SpeculativeMethod> method_of(const Json& root) {
  const auto method = root.find("method");
  const bool has_model = root.contains("model") && !root["model"].is_null();
  if (method == root.end() || method->is_null()) {
    if (has_model) return SpeculativeMethod::kDraftModel;
    return invalid_argument("[speculative-config] needs a \"method\" (ngram, draft_model, mtp) or a draft \"model\"");
  }
  if (!method->is_string()) return invalid_argument("[speculative-config] method must be a string, got {}", method->dump());
  const std::string name = method->get<std::string>();
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft_model") return SpeculativeMethod::kDraftModel;
  if (name == "mtp") return SpeculativeMethod::kMtp;
  return invalid_argument("[speculative-config] unknown method '{}' (supported: ngram, draft_model, mtp)", name);
}
}  // namespace

std::string_view speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNone: return "none";
    case SpeculativeMethod::kNgram: return "ngram";
    case SpeculativeMethod::kDraftModel: return "draft_model";
    case SpeculativeMethod::kMtp: return "mtp";
  }
  return "unknown";
}

Expected<SpeculativeConfig> parse_speculative_config(std::string_view json_text) {
  SpeculativeConfig config;
  if (json_text.find_first_not_of(" \t\r\n") == std::string_view::npos) return config;
  const Json root = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument("[speculative-config] not valid JSON: {}", json_text);
  if (!root.is_object()) return invalid_argument("[speculative-config] must be a JSON object, got {}", json_text);
  PAGELLM_RETURN_IF_ERROR(check_keys(root));
  PAGELLM_ASSIGN_OR_RETURN(config.method, method_of(root));
  if (!root.contains("num_speculative_tokens"))
    return invalid_argument("[speculative-config] needs num_speculative_tokens");
  PAGELLM_ASSIGN_OR_RETURN(config.num_speculative_tokens, integer_field(root, "num_speculative_tokens", 0));
  if (config.num_speculative_tokens < 1 || config.num_speculative_tokens > SpeculativeConfig::kMaxSpeculativeTokens)
    return invalid_argument("[speculative-config] num_speculative_tokens must be in [1, {}], got {}",
                            SpeculativeConfig::kMaxSpeculativeTokens, config.num_speculative_tokens);
  const bool is_ngram = config.method == SpeculativeMethod::kNgram;
  if (!is_ngram && (root.contains("prompt_lookup_min") || root.contains("prompt_lookup_max")))
    return invalid_argument("[speculative-config] prompt_lookup_min / prompt_lookup_max are for method ngram");
  if (is_ngram) {
    if (root.contains("model")) return invalid_argument("[speculative-config] method ngram takes no model");
    PAGELLM_ASSIGN_OR_RETURN(config.prompt_lookup_max, integer_field(root, "prompt_lookup_max", 0));
    PAGELLM_ASSIGN_OR_RETURN(config.prompt_lookup_min, integer_field(root, "prompt_lookup_min", 0));
    if (config.prompt_lookup_max == 0 && config.prompt_lookup_min == 0) config.prompt_lookup_max = config.prompt_lookup_min = 5;
    if (config.prompt_lookup_min == 0) config.prompt_lookup_min = config.prompt_lookup_max;
    if (config.prompt_lookup_max == 0) config.prompt_lookup_max = config.prompt_lookup_min;
    if (config.prompt_lookup_min < 1)
      return invalid_argument("[speculative-config] prompt_lookup_min must be >= 1, got {}", config.prompt_lookup_min);
    if (config.prompt_lookup_max < config.prompt_lookup_min)
      return invalid_argument("[speculative-config] prompt_lookup_max ({}) must be >= prompt_lookup_min ({})",
                              config.prompt_lookup_max, config.prompt_lookup_min);
  }
  if (config.method == SpeculativeMethod::kMtp && root.contains("model"))
    return invalid_argument("[speculative-config] method mtp takes no model: the head is the target checkpoint's mtp.*");
  if (config.method == SpeculativeMethod::kDraftModel) {
    const auto model = root.find("model");
    if (model == root.end() || !model->is_string() || model->get<std::string>().empty())
      return invalid_argument("[speculative-config] method draft_model needs \"model\": the draft's folder");
    config.draft_model_dir = model->get<std::string>();
  }
  return config;
}

}  // namespace pagellm
