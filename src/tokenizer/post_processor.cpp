#include "tokenizer/post_processor.h"

#include <cstdint>

#include <nlohmann/json.hpp>

namespace pagellm {
namespace {

using json = nlohmann::json;

// A token id written in the template: an integer in [0, INT32_MAX] (a float such as 2.1e10
// would not even convert).
Expected<int32_t> template_id(const json& value) {
  const bool ok = value.is_number_unsigned() ? value.get<uint64_t>() <= uint64_t(INT32_MAX)
                  : value.is_number_integer() ? value.get<int64_t>() >= 0 && value.get<int64_t>() <= INT32_MAX
                                              : false;
  if (!ok) return invalid_argument("[tokenizer] post_processor token id {} is not a valid id", value.dump());
  return static_cast<int32_t>(value.get<int64_t>());
}

Status add_template(const json& config, PostProcessor& pp) {
  if (!config.contains("single") || !config["single"].is_array()) {
    return invalid_argument("[tokenizer] TemplateProcessing needs a \"single\" array");
  }
  const json specials = config.value("special_tokens", json::object());
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& item : config["single"]) {
    if (item.contains("Sequence")) {
      if (seen_sequence) {
        return unimplemented("[tokenizer] unsupported TemplateProcessing: sequence repeated");
      }
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id")) {
      return invalid_argument("[tokenizer] TemplateProcessing item must be SpecialToken or Sequence");
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    if (!specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array()) {
      return invalid_argument("[tokenizer] TemplateProcessing special token '{}' has no ids", name);
    }
    for (const auto& id : specials[name]["ids"]) {
      PAGELLM_ASSIGN_OR_RETURN(int32_t value, template_id(id));
      (seen_sequence ? suffix : prefix).push_back(value);
    }
  }
  pp.prefix_ids.insert(pp.prefix_ids.begin(), prefix.begin(), prefix.end());
  pp.suffix_ids.insert(pp.suffix_ids.end(), suffix.begin(), suffix.end());
  return Status::ok();
}

Status add_one(const json& config, PostProcessor& pp) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return invalid_argument("[tokenizer] post_processor must be an object with a string \"type\"");
  }
  const std::string type = config["type"].get<std::string>();
  if (type == "ByteLevel") return Status::ok();
  if (type == "TemplateProcessing") return add_template(config, pp);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // "cls": ["<s>", 0], "sep": ["</s>", 2]
    for (const char* key : {"cls", "sep"}) {
      if (!config.contains(key) || !config[key].is_array() || config[key].size() != 2 ||
          !config[key][1].is_number_integer()) {
        return invalid_argument("[tokenizer] {} needs \"{}\": [token, id]", type, key);
      }
    }
    PAGELLM_ASSIGN_OR_RETURN(int32_t cls, template_id(config["cls"][1]));
    PAGELLM_ASSIGN_OR_RETURN(int32_t sep, template_id(config["sep"][1]));
    pp.prefix_ids.insert(pp.prefix_ids.begin(), cls);
    pp.suffix_ids.push_back(sep);
    return Status::ok();
  }
  if (type == "Sequence") {
    if (!config.contains("processors") || !config["processors"].is_array()) {
      return invalid_argument("[tokenizer] Sequence post_processor needs a \"processors\" array");
    }
    for (const auto& step : config["processors"]) PAGELLM_RETURN_IF_ERROR(add_one(step, pp));
    return Status::ok();
  }
  return unimplemented("[tokenizer] unsupported post_processor type '{}'", type);
}

}  // namespace

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids) const {
  if (prefix_ids.empty() && suffix_ids.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_ids.size() + ids.size() + suffix_ids.size());
  out.insert(out.end(), prefix_ids.begin(), prefix_ids.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_ids.begin(), suffix_ids.end());
  return out;
}

Expected<PostProcessor> make_post_processor(const json& config) {
  PostProcessor pp;
  if (config.is_null()) return pp;
  PAGELLM_RETURN_IF_ERROR(add_one(config, pp));
  return pp;
}

}  // namespace pagellm
