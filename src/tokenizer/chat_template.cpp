#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_string.h"
#include "tokenizer/jinja_value.h"

namespace pagellm {

namespace {

// transformers' SPECIAL_TOKENS_ATTRIBUTES; tokenizer_config.json's extra_special_tokens join them.
const char* const kSpecialTokenNames[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};

Status template_error(const std::string& message, int line, int col) {
  std::string one_line = message;
  for (char& c : one_line)
    if (c == '\n' || c == '\r') c = ' ';
  if (line > 0) return invalid_argument("[chat_template] line {}, column {}: {}", line, col, one_line);
  return invalid_argument("[chat_template] {}", one_line);
}

// A token given as "text" or as an AddedToken object {"content": "text", ...}; "" when absent.
Expected<std::string> token_content(const nlohmann::ordered_json& token, const std::string& name) {
  if (token.is_null()) return std::string();
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string())
    return token["content"].get<std::string>();
  return invalid_argument("[chat_template] special token '{}' must be a string or an object with \"content\"", name);
}

// Mirrors transformers' special_tokens_map: only tokens that are set and non-empty.
Expected<nlohmann::ordered_json> normalize_special_tokens(const nlohmann::ordered_json& config) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  if (!config.is_object()) return invalid_argument("[chat_template] special tokens must be a JSON object");
  auto add = [&](const std::string& name, const nlohmann::ordered_json& token) -> Status {
    PAGELLM_ASSIGN_OR_RETURN(std::string content, token_content(token, name));
    if (!content.empty()) out[name] = content;
    return Status::ok();
  };
  for (const char* name : kSpecialTokenNames)
    if (config.contains(name)) PAGELLM_RETURN_IF_ERROR(add(name, config[name]));
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [name, token] : config["extra_special_tokens"].items()) PAGELLM_RETURN_IF_ERROR(add(name, token));
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& token : config["additional_special_tokens"]) {
      PAGELLM_ASSIGN_OR_RETURN(std::string content, token_content(token, "additional_special_tokens"));
      list.push_back(content);
    }
    if (!list.empty()) out["additional_special_tokens"] = list;
  }
  return out;
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_tokenizer_config(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return not_found("[chat_template] cannot open {}", path);
  std::stringstream buffer;
  buffer << file.rdbuf();
  nlohmann::ordered_json config;
  try {
    config = nlohmann::ordered_json::parse(buffer.str());
  } catch (const std::exception& e) {
    return invalid_argument("[chat_template] {} is not valid JSON: {}", path, e.what());
  }
  if (!config.is_object()) return invalid_argument("[chat_template] {} is not a JSON object", path);
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    return not_found("[chat_template] {} has no chat_template", path);
  const auto& ct = config["chat_template"];
  std::string source;
  if (ct.is_string()) {
    source = ct.get<std::string>();
  } else if (ct.is_array()) {
    bool found = false;
    for (const auto& entry : ct) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") && entry["template"].is_string()) {
        source = entry["template"].get<std::string>();
        found = true;
      }
    }
    if (!found) return not_found("[chat_template] {} has no chat_template named \"default\"", path);
  } else {
    return invalid_argument("[chat_template] chat_template in {} must be a string or a list", path);
  }
  nlohmann::ordered_json tokens = config;
  tokens.erase("chat_template");
  return from_string(std::move(source), std::move(tokens));
}

Expected<ChatTemplate> ChatTemplate::from_string(std::string template_source, nlohmann::ordered_json special_tokens) {
  if (!jinja::is_valid_utf8(template_source)) return invalid_argument("[chat_template] template is not valid UTF-8");
  ChatTemplate t;
  PAGELLM_ASSIGN_OR_RETURN(t.special_tokens_, normalize_special_tokens(special_tokens));
  try {
    t.template_ = std::make_shared<const jinja::Template>(jinja::parse_template(template_source));
  } catch (const jinja::TemplateError& e) {
    return template_error(e.what(), e.line, e.col);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, "[chat_template] internal error: " + std::string(e.what()));
  }
  t.source_ = std::move(template_source);
  return t;
}

Expected<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  if (!inputs.messages.is_array()) return invalid_argument("[chat_template] messages must be a JSON array");
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) return invalid_argument("[chat_template] tools must be a JSON array or null");
  if (!inputs.extra_kwargs.is_null() && !inputs.extra_kwargs.is_object()) return invalid_argument("[chat_template] kwargs must be a JSON object");
  try {
    // Same variables, in the same precedence, as transformers' render(messages=..., tools=...,
    // documents=..., add_generation_prompt=..., **special_tokens_map, **kwargs).
    std::vector<std::pair<std::string, jinja::Value>> vars;
    vars.emplace_back("messages", jinja::Value::from_json(inputs.messages));
    vars.emplace_back("tools", jinja::Value::from_json(inputs.tools));
    vars.emplace_back("documents", jinja::Value(jinja::None{}));
    vars.emplace_back("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
    for (const auto& [name, token] : special_tokens_.items()) vars.emplace_back(name, jinja::Value::from_json(token));
    if (inputs.extra_kwargs.is_object()) {
      for (const auto& [name, value] : inputs.extra_kwargs.items()) {
        if (name == "messages" || name == "tools" || name == "add_generation_prompt")
          return invalid_argument("[chat_template] kwargs must not set '{}'", name);
        bool replaced = false;
        for (auto& [k, v] : vars) {
          if (k == name) {
            v = jinja::Value::from_json(value);
            replaced = true;
          }
        }
        if (!replaced) vars.emplace_back(name, jinja::Value::from_json(value));
      }
    }
    return jinja::render_template(*template_, vars);
  } catch (const jinja::TemplateError& e) {
    return template_error(e.what(), e.line, e.col);
  } catch (const std::bad_alloc&) {
    return template_error("out of memory while rendering", 0, 0);
  } catch (const std::exception& e) {
    // A bug on our side; still a one-line error rather than a crash of the server.
    return Status(StatusCode::kInternal, "[chat_template] internal error: " + std::string(e.what()));
  }
}

}  // namespace pagellm
