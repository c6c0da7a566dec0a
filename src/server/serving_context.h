// ServingContext: what every route handler of `pagellm serve` needs, fixed at start-up.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "server/generation_defaults.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

struct ServingContext {
  Engine* engine = nullptr;                     // started; outlives the HTTP server
  std::shared_ptr<const Tokenizer> tokenizer;   // null: prompts must be token ids, no chat
  std::optional<ChatTemplate> chat_template;    // null: chat requests are refused with this reason:
  std::string chat_template_error;
  std::string served_model_name;
  std::string model_dir;
  std::string tokenizer_dir;                    // --tokenizer, else model_dir: tokenizer.json, tokenizer_config.json
  std::string api_key;                          // empty: no authentication
  ParseOptions parse_options;                   // served name, vocab size, limits
  int max_model_len = 0;
  GenerationDefaults generation_defaults;       // --generation-config: for fields requests leave out
  // Chat output parsing (--reasoning-parser, --tool-call-parser; "" = none). The tool-call parser
  // reads tool_choice "auto" calls only with --enable-auto-tool-choice (parse_options says so).
  std::string reasoning_parser;
  std::string tool_call_parser;
  // Text prompts longer than this (bytes) cannot fit in max_model_len tokens and are refused before
  // tokenizing (0: no such check). Filled by make_api_handler (see prompt_byte_limit.h).
  size_t max_prompt_bytes = 0;
  // The built-in chat page at / (chat_page.h); `pagellm serve` turns it on unless --no-ui.
  bool serve_chat_page = false;
};

}  // namespace pagellm::server
