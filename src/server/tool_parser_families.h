// The tool-call parser families behind make_tool_parser() (internal to src/server):
//   hermes, llama3_json, mistral   tool_parser_json.cpp     calls written as JSON objects
//   qwen3_coder                    tool_parser_qwen3_coder.cpp  <function=...><parameter=...>
//   openai (gpt-oss harmony)       tool_parser_harmony.cpp  channels; also the "openai" reasoning parser
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/tool_parser.h"

namespace pagellm::server {

std::unique_ptr<OutputParser> make_hermes_parser(ToolCallIdFn new_id);
std::unique_ptr<OutputParser> make_llama3_json_parser(ToolCallIdFn new_id);
std::unique_ptr<OutputParser> make_mistral_parser(ToolCallIdFn new_id);
std::unique_ptr<OutputParser> make_qwen3_coder_parser(const nlohmann::ordered_json& tools, ToolCallIdFn new_id);
// extract_tools false: calls to functions stay content (the model was given no tools).
std::unique_ptr<OutputParser> make_harmony_parser(bool extract_tools, ToolCallIdFn new_id);

// Text mode of a parser that waits for `marker`: text before it goes to `sink` (a partial marker at
// the end is held back unless `final`). True when the marker was found and consumed.
bool scan_to_marker(std::string& pending, std::string_view marker, bool final, ContentSink& sink, MessageDelta& out);

// An optional closing tag after a call ("</tool_call>"), spaces before it allowed.
enum class TagMatch { kFound, kAbsent, kNeedMore };
TagMatch consume_tag(std::string& pending, std::string_view tag, bool final);

// Reads one JSON call object, `{"name": ..., "arguments": ...}`, from text fed to it. When its head
// is the usual one (name first), the call's id and name go out at once and the arguments stream as
// they arrive; any other object is read whole and then judged. Either way the decision depends on
// the text only, never on where the deltas were split.
class JsonCallReader {
 public:
  enum class Status { kReading, kCall, kNotACall };

  // Consumes text up to the end of the object (the rest is the caller's); `index` numbers the call.
  size_t feed(std::string_view text, int index, const ToolCallIdFn& new_id, MessageDelta& out);
  // End of output while still reading: a streamed call ends there; anything else is not a call.
  void finish(int index, const ToolCallIdFn& new_id, MessageDelta& out);
  Status status() const { return status_; }
  bool emitted_call() const { return emitted_; }  // the call's first delta went out
  const std::string& held_text() const { return held_; }  // consumed, not emitted (content when not a call)

 private:
  enum class Phase { kHead, kArguments, kTail, kWhole };
  void start_arguments(char first, int index, const ToolCallIdFn& new_id, MessageDelta& out, std::string& piece);
  void end_whole(int index, const ToolCallIdFn& new_id, MessageDelta& out);

  Phase phase_ = Phase::kHead;
  Status status_ = Status::kReading;
  bool emitted_ = false;
  std::string held_;                // head or whole object, while undecided
  std::string string_arguments_;    // arguments given as a JSON string: unwrapped at its end
  JsonValueScanner object_;         // where the call object ends
  JsonValueScanner arguments_;      // where the arguments value ends
};

// The frame of the text-scanning parsers: each delta joins the pending text and run() consumes
// what can be decided; at the end run(final = true) decides the rest.
class PendingTextParser : public OutputParser {
 public:
  explicit PendingTextParser(ToolCallIdFn new_id = {}) : new_id_(std::move(new_id)) {}
  void feed(std::string_view text, MessageDelta& out) final {
    pending_ += text;
    run(false, out);
  }
  void finish(MessageDelta& out) final {
    run(true, out);
    sink_.finish(out);
  }

 protected:
  virtual void run(bool final, MessageDelta& out) = 0;
  // Reads the JSON call at the front of the pending text with reader_ (kReading: undecided). A
  // call drops the whitespace around it from the content and moves index_ on.
  JsonCallReader::Status read_json_call(bool final, MessageDelta& out);

  ToolCallIdFn new_id_;
  std::string pending_;
  ContentSink sink_;
  JsonCallReader reader_;
  int index_ = 0;  // the next call's index
};

}  // namespace pagellm::server
