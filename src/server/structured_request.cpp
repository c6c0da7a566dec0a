#include "server/structured_request.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace pagellm::server {

namespace {

using Json = nlohmann::ordered_json;
using structured::Constraint;
using structured::ConstraintKind;

// A schema given as an object or as JSON text.
std::optional<ApiError> schema_text(const Json& value, const std::string& param, std::string& out) {
  if (value.is_object() || value.is_boolean()) {
    out = value.dump();
    return std::nullopt;
  }
  if (value.is_string()) {
    const Json parsed = Json::parse(value.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) {
      out = parsed.dump();
      return std::nullopt;
    }
  }
  return bad_request(fmt::format("[openai] '{}' must be a JSON Schema (an object, or JSON text of one)", param), param,
                     "invalid_value");
}

std::optional<ApiError> string_field(const Json& value, const std::string& param, std::string& out) {
  if (!value.is_string() || value.get<std::string>().empty())
    return bad_request(fmt::format("[openai] '{}' must be a non-empty string", param), param, "invalid_type");
  out = value.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> choice_list(const Json& value, const std::string& param, std::vector<std::string>& out) {
  if (!value.is_array() || value.empty())
    return bad_request(fmt::format("[openai] '{}' must be a non-empty list of strings", param), param, "invalid_type");
  for (const Json& item : value) {
    if (!item.is_string())
      return bad_request(fmt::format("[openai] '{}' must be a non-empty list of strings", param), param, "invalid_type");
    out.push_back(item.get<std::string>());
  }
  return std::nullopt;
}

// One constraint from one field; `kind_key` names its form ("json", "regex", ...).
std::optional<ApiError> constraint_of(const std::string& kind_key, const Json& value, const std::string& param,
                                      Constraint& out) {
  if (kind_key == "json") {
    out.kind = ConstraintKind::kJsonSchema;
    return schema_text(value, param, out.text);
  }
  if (kind_key == "regex") {
    out.kind = ConstraintKind::kRegex;
    return string_field(value, param, out.text);
  }
  if (kind_key == "choice") {
    out.kind = ConstraintKind::kChoice;
    return choice_list(value, param, out.choices);
  }
  if (kind_key == "grammar") {
    out.kind = ConstraintKind::kGrammar;
    return string_field(value, param, out.text);
  }
  out.kind = ConstraintKind::kJsonObject;  // "json_object": true
  if (!value.is_boolean())
    return bad_request(fmt::format("[openai] '{}' must be true or false", param), param, "invalid_type");
  return std::nullopt;
}

std::optional<ApiError> set_constraint(CommonFields& common, Constraint constraint, std::string param) {
  if (common.constraint)
    return bad_request(fmt::format("[openai] '{}' and '{}' both constrain the output; give one", common.constraint_param,
                                   param),
                       param, "invalid_value");
  common.constraint = std::move(constraint);
  common.constraint_param = std::move(param);
  return std::nullopt;
}

std::optional<ApiError> read_response_format(const Json& format, CommonFields& common) {
  if (!format.is_object() || !format.contains("type") || !format["type"].is_string())
    return bad_request("[openai] 'response_format' must be an object with a 'type'", "response_format", "invalid_type");
  const std::string type = format["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return set_constraint(common, Constraint{ConstraintKind::kJsonObject, "", {}}, "response_format");
  if (type != "json_schema")
    return bad_request(fmt::format("[openai] response_format type '{}' is not one of text, json_object, json_schema", type),
                       "response_format.type", "invalid_value");
  const auto spec = format.find("json_schema");
  if (spec == format.end() || !spec->is_object() || !spec->contains("schema"))
    return bad_request("[openai] response_format json_schema needs 'json_schema': {\"name\", \"schema\"}",
                       "response_format.json_schema", "missing_required_parameter");
  Constraint constraint;
  constraint.kind = ConstraintKind::kJsonSchema;
  if (auto error = schema_text((*spec)["schema"], "response_format.json_schema.schema", constraint.text)) return error;
  return set_constraint(common, std::move(constraint), "response_format");
}

std::optional<ApiError> read_logit_bias(const Json& bias, SamplingParams& sampling) {
  if (!bias.is_object())
    return bad_request("[openai] 'logit_bias' must map token ids to numbers", "logit_bias", "invalid_type");
  for (const auto& [key, value] : bias.items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX)
      return bad_request(fmt::format("[openai] logit_bias key '{}' is not a token id", key), "logit_bias", "invalid_value");
    if (!value.is_number() || !(std::fabs(value.get<double>()) <= 100.0))
      return bad_request(fmt::format("[openai] logit_bias of token {} must be a number in [-100, 100]", key), "logit_bias",
                         "invalid_value");
    sampling.logit_bias.emplace_back(static_cast<TokenId>(id), static_cast<float>(value.get<double>()));
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_structured_output(const Json& body, CommonFields& common) {
  auto field = [&](const char* name) -> const Json* {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const Json* bias = field("logit_bias"))
    if (auto error = read_logit_bias(*bias, common.sampling)) return error;
  if (const Json* format = field("response_format"))
    if (auto error = read_response_format(*format, common)) return error;
  if (const Json* outputs = field("structured_outputs")) {
    if (!outputs->is_object())
      return bad_request("[openai] 'structured_outputs' must be an object", "structured_outputs", "invalid_type");
    for (const char* key : {"json", "regex", "choice", "grammar", "json_object"}) {
      const auto it = outputs->find(key);
      if (it == outputs->end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
      Constraint constraint;
      const std::string param = fmt::format("structured_outputs.{}", key);
      if (auto error = constraint_of(key, *it, param, constraint)) return error;
      if (auto error = set_constraint(common, std::move(constraint), param)) return error;
    }
  }
  for (const char* key : {"json", "regex", "choice", "grammar"}) {
    const std::string param = fmt::format("guided_{}", key);
    const Json* value = field(param.c_str());
    if (value == nullptr) continue;
    Constraint constraint;
    if (auto error = constraint_of(key, *value, param, constraint)) return error;
    if (auto error = set_constraint(common, std::move(constraint), param)) return error;
  }
  return std::nullopt;
}

std::optional<ApiError> add_tool_choice_constraint(const std::optional<Json>& schema, CommonFields& common) {
  if (!schema) return std::nullopt;
  return set_constraint(common, Constraint{ConstraintKind::kJsonSchema, schema->dump(), {}}, "tool_choice");
}

}  // namespace pagellm::server
