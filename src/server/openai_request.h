// OpenAI request bodies -> validated pagellm requests. Field names, types and ranges follow the
// OpenAI API and vLLM's extensions (serving.md); unknown fields are ignored, a known field with a
// wrong type or value is a 400 naming it ("param").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sched/request.h"
#include "structured/structured.h"
#include "server/api_error.h"
#include "server/tool_parser_choice.h"
#include "tokenizer/chat_template.h"

namespace pagellm::server {

struct ParseOptions {
  std::string served_model_name;
  std::vector<std::string> model_aliases;  // more names "model" may say (--served-model-name A B ...)
  int64_t vocab_size = 0;
  int max_logprobs = 20;  // top alternatives per token at most
  int max_n = 128;        // samples per prompt at most
  int max_prompts = 1024; // prompts per completions request at most
  // --enable-auto-tool-choice with a --tool-call-parser: tool_choice "auto" (the default when
  // tools are given) reads calls from the output. Without it such requests are refused (as vLLM).
  bool auto_tool_choice = false;
};

// Fields shared by /v1/completions and /v1/chat/completions.
struct CommonFields {
  SamplingParams sampling;            // max_tokens is set per prompt by fit_max_tokens()
  // Structured outputs (structured_request.h): what the text must match, and the field that said so.
  std::optional<structured::Constraint> constraint;
  std::string constraint_param;
  std::optional<int64_t> max_tokens;  // as given (max_tokens or max_completion_tokens)
  std::vector<std::string> stop;
  int n = 1;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool skip_special_tokens = true;    // special tokens left out of the text
  bool include_stop_str_in_output = false;
  std::optional<bool> add_special_tokens;  // tokenizer's BOS/EOS around a text prompt (default: chat no, completions yes)
};

struct CompletionRequest {
  CommonFields common;
  std::vector<std::string> prompt_texts;         // prompts given as text, or
  std::vector<std::vector<TokenId>> prompt_ids;  // prompts given as token ids
  bool echo = false;
  std::optional<int> num_logprobs;               // "logprobs": int
};

struct ChatRequest {
  CommonFields common;
  ChatTemplateInputs template_inputs;  // messages with text content, tools, kwargs
  bool logprobs = false;
  int top_logprobs = 0;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();  // validated, as given
  ToolChoice tool_choice;              // kNone when the request has no tools
  bool parallel_tool_calls = true;
  bool include_reasoning = true;       // vLLM's include_reasoning: false drops reasoning_content
  // tool_choice "required" or a named function: the JSON Schema the generated text must match
  // (tool_choice_schema(); the text formats are in tool_parser_choice.h). Constrained decoding
  // applies it as it would a response_format json_schema; the response reads the text back into
  // tool calls with make_forced_tool_call_parser().
  std::optional<nlohmann::ordered_json> guided_json_schema;
};

// Parses a body as JSON (ordered: key order reaches chat templates through tojson).
std::optional<ApiError> parse_json_body(std::string_view body, nlohmann::ordered_json& out);
std::optional<ApiError> parse_completion_request(const nlohmann::ordered_json& body, const ParseOptions& options,
                                                 CompletionRequest& out);
std::optional<ApiError> parse_chat_request(const nlohmann::ordered_json& body, const ParseOptions& options,
                                           ChatRequest& out);
// Generation only (not /tokenize): tool_choice "auto" needs the server's tool-call parser, else
// the calls would go unread (vLLM refuses these requests the same way).
std::optional<ApiError> check_tool_choice_servable(const ChatRequest& request, const ParseOptions& options);
// "model" must be the served name: absent 400, another name 404.
std::optional<ApiError> check_model(const nlohmann::ordered_json& body, const ParseOptions& options);
// Prompt ids given by a client must be in the vocabulary.
std::optional<ApiError> check_token_ids(const std::vector<TokenId>& ids, int64_t vocab_size, const char* param);
// The output budget of one prompt: a given max_tokens must fit in max_model_len with the prompt
// (else 400 naming both numbers); without one, whatever room max_model_len leaves (as vLLM).
std::optional<ApiError> fit_max_tokens(const CommonFields& common, int num_prompt_tokens, int max_model_len,
                                       int& max_tokens);

}  // namespace pagellm::server
