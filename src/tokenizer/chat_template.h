// Chat templates: renders the `chat_template` of a tokenizer_config.json exactly as
// transformers' apply_chat_template does (jinja2 ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loop controls; tojson keeping non-ASCII; raise_exception and
// strftime_now globals; the tokenizer's special tokens and extra kwargs as variables).
//
//   PAGELLM_ASSIGN_OR_RETURN(auto tmpl, ChatTemplate::from_tokenizer_config(dir + "/tokenizer_config.json"));
//   PAGELLM_ASSIGN_OR_RETURN(std::string prompt, tmpl.render({.messages = msgs, .add_generation_prompt = true}));
//
// Errors (missing template, syntax errors, raise_exception, runtime errors) come back as one
// line: "[chat_template] line 3, column 14: <message>".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace pagellm {

namespace jinja {
struct Template;
class Value;
}  // namespace jinja

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools;  // null (template sees None) or a list of tool schemas
  bool add_generation_prompt = false;
  // Extra template variables (enable_thinking, documents, ...); they override special tokens.
  nlohmann::ordered_json extra_kwargs = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Reads `chat_template` (a string, or a list of {name, template} where "default" is used) and
  // the special tokens (strings or {"content": ...} objects) from tokenizer_config.json.
  static Expected<ChatTemplate> from_tokenizer_config(const std::string& tokenizer_config_json_path);
  // special_tokens: {"bos_token": "<s>" or {"content": "<s>"}, "additional_special_tokens": [...], ...}.
  static Expected<ChatTemplate> from_string(std::string template_source,
                                            nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  Expected<std::string> render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;

  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
  nlohmann::ordered_json special_tokens_;  // name -> string or list of strings
};

}  // namespace pagellm
