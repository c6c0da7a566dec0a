// tool_choice "required" and named: what the output must look like, and how it is read back.
//
// These choices are enforced by constrained decoding (src/structured/): the request carries
// tool_choice_schema()'s JSON Schema as its guided_json_schema, the engine masks every token that
// would leave it, and ForcedToolCallParser turns the text into tool calls. The text format is
// vLLM's, so clients and the grammar agree with it:
//   named     the function's arguments object itself:        {"city": "Paris"}
//   required  a non-empty list of calls (one when parallel_tool_calls is false):
//             [{"name": "get_weather", "parameters": {"city": "Paris"}}, ...]
// Text that does not parse that way (no grammar applied it) is returned as content, unchanged.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_parser.h"

namespace pagellm::server {

struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string function;  // kNamed: the function's name (one of the request's tools)
};

// The request's tools are validated OpenAI tools: [{"type": "function", "function": {"name", "parameters"?}}].
nlohmann::ordered_json tool_choice_schema(const ToolChoice& choice, const nlohmann::ordered_json& tools,
                                          bool parallel_tool_calls);

std::unique_ptr<OutputParser> make_forced_tool_call_parser(const ToolChoice& choice, ToolCallIdFn new_id = {});

// The whole output pipeline of one chat choice: reasoning, then tool calls. Null when the text
// passes through unchanged.
struct ChatOutputOptions {
  std::string reasoning_parser;  // --reasoning-parser ("" = none)
  std::string tool_parser;       // --tool-call-parser, used for tool_choice auto ("" = none)
  ToolChoice tool_choice;        // kNone also when the request has no tools
  nlohmann::ordered_json tools;
  bool parallel_tool_calls = true;  // false: calls after the first are dropped
};
std::unique_ptr<OutputParser> make_chat_output_parser(const ChatOutputOptions& options, std::string_view prompt);

}  // namespace pagellm::server
