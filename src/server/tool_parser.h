// Output parsers: turn a chat model's generated text into the parts of an OpenAI message —
// reasoning, content and tool calls — as whole text or incrementally, while it streams.
//
// Every parser is one streaming state machine (OutputParser): feed() takes text deltas as the
// engine publishes them and returns what became certain; finish() flushes the rest. The whole-text
// form is the same machine fed once (parse_whole), so a streamed response reassembles to exactly
// the non-streamed one, wherever the text was split. Text that might still become a tag
// ("<tool_c") is held back until it is decided; text that turns out not to be a well-formed call
// is content.
//
//   text ──▶ reasoning parser ──content──▶ tool-call parser ──▶ MessageDelta {reasoning, content, tool_calls}
//
// Tool-call deltas follow OpenAI's stream: a call's first delta carries index, id and name, later
// ones argument pieces (the arguments' JSON text as the model wrote it, or as built from its
// XML-style parameters).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::server {

struct ToolCallDelta {
  int index = 0;          // position of the call in the message
  std::string id;         // set on the call's first delta only
  std::string name;       // set on the call's first delta only
  std::string arguments;  // the next piece of the arguments' JSON text
};

struct MessageDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;  // pieces in order; one call's pieces are merged

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(const MessageDelta& other);
  void add_tool_piece(ToolCallDelta piece);
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// A whole message: the deltas of one output, reassembled.
struct ParsedMessage {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;

  void apply(const MessageDelta& delta);
};

class OutputParser {
 public:
  virtual ~OutputParser() = default;
  virtual void feed(std::string_view text, MessageDelta& out) = 0;
  virtual void finish(MessageDelta& out) = 0;
};

ParsedMessage parse_whole(OutputParser& parser, std::string_view text);

// Tool-call ids: "call_" + 24 random alphanumerics (OpenAI's shape); Mistral's templates check
// for exactly 9 alphanumerics.
std::string random_alphanumeric(size_t length);
std::string random_tool_call_id();
using ToolCallIdFn = std::function<std::string()>;

// vLLM's --tool-call-parser names that pagellm implements.
const std::vector<std::string>& tool_parser_names();
bool is_tool_parser_name(std::string_view name);
// Whether the parser reads tokens that tokenizers mark special (Mistral's [TOOL_CALLS], harmony's
// <|channel|>): the detokenizer must then keep special tokens in the text it publishes.
bool tool_parser_needs_special_tokens(std::string_view name);
// tools: the request's tool list (qwen3_coder reads parameter types from it). Returns null for an
// unknown name. The "openai" parser also separates harmony's analysis channel as reasoning.
std::unique_ptr<OutputParser> make_tool_parser(std::string_view name, const nlohmann::ordered_json& tools,
                                               ToolCallIdFn new_id = {});

// ---- building blocks shared by the parser families ----

// Length of the longest proper prefix of `marker` that `text` ends with: text that must be held
// back because the next delta may complete the marker.
size_t partial_marker_suffix(std::string_view text, std::string_view marker);

// Content passed through a tool-call parser: whitespace next to a tool call is dropped (the
// "\n\n" between "</think>" or a sentence and "<tool_call>"), other whitespace is kept. Trailing
// whitespace is therefore held until non-space text follows or the output ends.
class ContentSink {
 public:
  void text(std::string_view text, MessageDelta& out);
  void before_call() { held_.clear(); }
  void after_call() { after_call_ = true; held_.clear(); }
  void finish(MessageDelta& out);

 private:
  std::string held_;        // trailing whitespace not emitted yet
  bool after_call_ = false; // the last thing emitted was a call: leading whitespace is dropped
};

// Finds where a JSON value ends, one character at a time (strings and escapes understood).
class JsonValueScanner {
 public:
  // Feeds one character; returns false when `c` is not part of the value (a scalar's delimiter),
  // after which done() is true. A container's closing bracket is part of it and ends it.
  bool feed(char c);
  bool done() const { return done_; }
  bool started() const { return started_; }
  bool is_string() const { return first_ == '"'; }

 private:
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  bool started_ = false;
  bool done_ = false;
  char first_ = 0;
};

// The head of a JSON tool call: `{"name": "get_weather", "arguments": ` (or "parameters").
struct CallHeader {
  enum class Match { kNeedMore, kMatched, kMismatch };
  Match match = Match::kNeedMore;
  std::string name;
  size_t length = 0;  // bytes of the head, when matched
};
CallHeader match_call_header(std::string_view text);

// A complete JSON call object {"name": ..., "arguments" | "parameters": ...} in any key order;
// nullopt when `text` is not one. Arguments given as a JSON string are unwrapped.
std::optional<ToolCall> parse_call_object(std::string_view text);

}  // namespace pagellm::server
