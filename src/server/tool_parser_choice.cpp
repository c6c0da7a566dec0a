#include "server/tool_parser_choice.h"

#include "server/reasoning_parser.h"
#include "server/tool_parser_families.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

const Json* find_function(const Json& tools, const std::string& name) {
  for (const Json& tool : tools)
    if (tool.contains("function") && tool["function"].value("name", "") == name) return &tool["function"];
  return nullptr;
}

Json parameters_schema(const Json& function) {
  const auto it = function.find("parameters");
  if (it == function.end() || it->is_null()) return Json{{"type", "object"}, {"properties", Json::object()}};
  return *it;
}

std::string trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(text.substr(begin, text.find_last_not_of(" \t\r\n") - begin + 1));
}

class ForcedToolCallParser final : public OutputParser {
 public:
  ForcedToolCallParser(ToolChoice choice, ToolCallIdFn new_id) : choice_(std::move(choice)), new_id_(std::move(new_id)) {}
  // The text is judged whole: until the grammar guarantees it, a prefix proves nothing.
  void feed(std::string_view text, MessageDelta&) override { text_ += text; }
  void finish(MessageDelta& out) override {
    std::vector<ToolCall> calls = read_calls();
    if (calls.empty()) out.content += text_;
    for (size_t i = 0; i < calls.size(); ++i)
      out.add_tool_piece({static_cast<int>(i), new_id_(), calls[i].name, calls[i].arguments});
  }

 private:
  std::vector<ToolCall> read_calls() const {
    const std::string text = trim(text_);
    const Json parsed = Json::parse(text, nullptr, false);
    if (choice_.mode == ToolChoice::Mode::kNamed) {
      if (!parsed.is_object()) return {};
      return {ToolCall{"", choice_.function, text}};
    }
    if (!parsed.is_array() || parsed.empty()) return {};
    std::vector<ToolCall> calls;
    for (const Json& item : parsed) {
      std::optional<ToolCall> call = parse_call_object(item.dump());
      if (!call) return {};
      calls.push_back(std::move(*call));
    }
    return calls;
  }

  ToolChoice choice_;
  ToolCallIdFn new_id_;
  std::string text_;
};

// Reasoning first, then tool calls on the content; optionally one call at most.
class ChainedParser final : public OutputParser {
 public:
  ChainedParser(std::unique_ptr<OutputParser> reasoning, std::unique_ptr<OutputParser> tools, bool single_call)
      : reasoning_(std::move(reasoning)), tools_(std::move(tools)), single_call_(single_call) {}
  void feed(std::string_view text, MessageDelta& out) override {
    MessageDelta first;
    if (reasoning_) reasoning_->feed(text, first);
    else first.content = text;
    pass_on(first, /*final=*/false, out);
  }
  void finish(MessageDelta& out) override {
    MessageDelta first;
    if (reasoning_) reasoning_->finish(first);
    pass_on(first, /*final=*/true, out);
  }

 private:
  void pass_on(const MessageDelta& first, bool final, MessageDelta& out) {
    MessageDelta second;
    second.reasoning = first.reasoning;
    for (const ToolCallDelta& piece : first.tool_calls) second.add_tool_piece(piece);
    if (tools_) {
      tools_->feed(first.content, second);
      if (final) tools_->finish(second);
    } else {
      second.content += first.content;
    }
    out.reasoning += second.reasoning;
    out.content += second.content;
    for (ToolCallDelta& piece : second.tool_calls)
      if (!single_call_ || piece.index == 0) out.add_tool_piece(std::move(piece));
  }

  std::unique_ptr<OutputParser> reasoning_;
  std::unique_ptr<OutputParser> tools_;
  bool single_call_;
};

}  // namespace

Json tool_choice_schema(const ToolChoice& choice, const Json& tools, bool parallel_tool_calls) {
  if (choice.mode == ToolChoice::Mode::kNamed) {
    const Json* function = find_function(tools, choice.function);
    return function ? parameters_schema(*function) : Json();
  }
  if (choice.mode != ToolChoice::Mode::kRequired) return Json();
  Json any_of = Json::array();
  for (const Json& tool : tools) {
    const Json& function = tool["function"];
    any_of.push_back(Json{{"type", "object"},
                          {"properties", {{"name", {{"type", "string"}, {"enum", {function["name"]}}}},
                                          {"parameters", parameters_schema(function)}}},
                          {"required", {"name", "parameters"}}});
  }
  Json schema{{"type", "array"}, {"minItems", 1}};
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  schema["items"] = Json{{"anyOf", std::move(any_of)}};
  return schema;
}

std::unique_ptr<OutputParser> make_forced_tool_call_parser(const ToolChoice& choice, ToolCallIdFn new_id) {
  if (!new_id) new_id = [] { return random_tool_call_id(); };
  return std::make_unique<ForcedToolCallParser>(choice, std::move(new_id));
}

std::unique_ptr<OutputParser> make_chat_output_parser(const ChatOutputOptions& options, std::string_view prompt) {
  using Mode = ToolChoice::Mode;
  const Mode mode = options.tool_choice.mode;
  const bool auto_tools = mode == Mode::kAuto && !options.tool_parser.empty();
  // Harmony carries reasoning and calls in one format: one parser reads both.
  if (options.reasoning_parser == "openai" || (auto_tools && options.tool_parser == "openai")) {
    std::unique_ptr<OutputParser> tools;
    if (mode == Mode::kRequired || mode == Mode::kNamed) tools = make_forced_tool_call_parser(options.tool_choice);
    return std::make_unique<ChainedParser>(make_harmony_parser(auto_tools, {}), std::move(tools),
                                           !options.parallel_tool_calls);
  }
  std::unique_ptr<OutputParser> reasoning;
  if (!options.reasoning_parser.empty()) reasoning = make_reasoning_parser(options.reasoning_parser, prompt);
  std::unique_ptr<OutputParser> tools;
  if (auto_tools) tools = make_tool_parser(options.tool_parser, options.tools);
  else if (mode == Mode::kRequired || mode == Mode::kNamed) tools = make_forced_tool_call_parser(options.tool_choice);
  if (!reasoning && !tools) return nullptr;
  return std::make_unique<ChainedParser>(std::move(reasoning), std::move(tools), !options.parallel_tool_calls);
}

}  // namespace pagellm::server
