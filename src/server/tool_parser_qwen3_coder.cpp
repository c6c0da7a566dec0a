// qwen3_coder (Qwen3-Coder, Qwen3.5): XML-style calls whose parameter values are raw text,
//
//   text <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
//
// The arguments JSON is built here, {"city": "Paris"}, each value converted by the type its
// parameter has in the request's tool schema (as vLLM's parser does): strings stay text, integers
// and numbers are parsed, booleans read true/false, objects and arrays are parsed as JSON, "null"
// is null; a value that does not convert stays a string. Each parameter streams as one piece.
#include <charconv>

#include "server/tool_parser_families.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kCallStart = "<tool_call>";
constexpr std::string_view kCallEnd = "</tool_call>";
constexpr std::string_view kFunctionStart = "<function=";
constexpr std::string_view kFunctionEnd = "</function>";
constexpr std::string_view kParameterStart = "<parameter=";
constexpr std::string_view kParameterEnd = "</parameter>";
constexpr size_t kMaxNameBytes = 256;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The schema type of one parameter ("string" when the schema does not say).
std::string parameter_type(const Json& tools, const std::string& function, const std::string& parameter) {
  if (!tools.is_array()) return "string";
  for (const Json& tool : tools) {
    const Json* fn = tool.is_object() && tool.contains("function") ? &tool["function"] : nullptr;
    if (!fn || !fn->is_object() || fn->value("name", "") != function) continue;
    const Json properties = fn->value("parameters", Json::object()).value("properties", Json::object());
    if (!properties.is_object() || !properties.contains(parameter)) return "string";
    const Json& schema = properties[parameter];
    if (!schema.is_object()) return "string";
    Json type = schema.value("type", Json());
    if (type.is_null() && schema.contains("anyOf") && schema["anyOf"].is_array())
      for (const Json& option : schema["anyOf"])
        if (option.is_object() && option.value("type", "") != "null") {
          type = option.value("type", Json());
          break;
        }
    if (type.is_array())
      for (const Json& t : type)
        if (t.is_string() && t != "null") return t.get<std::string>();
    return type.is_string() ? type.get<std::string>() : "string";
  }
  return "string";
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool is_one_of(const std::string& type, std::initializer_list<std::string_view> names) {
  for (std::string_view name : names)
    if (type.rfind(name, 0) == 0) return true;
  return false;
}

Json convert_value(const std::string& value, const std::string& schema_type) {
  const std::string type = lower(schema_type);
  if (lower(value) == "null") return nullptr;
  if (is_one_of(type, {"string", "str", "text", "varchar", "char", "enum"})) return value;
  if (is_one_of(type, {"int", "uint", "long", "short", "integer"})) {
    int64_t parsed = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
    return error == std::errc() && end == value.data() + value.size() ? Json(parsed) : Json(value);
  }
  if (is_one_of(type, {"number", "float", "double", "num"})) {
    const Json parsed = Json::parse(value, nullptr, false);
    return parsed.is_number() ? parsed : Json(value);
  }
  if (is_one_of(type, {"boolean", "bool", "binary"})) {
    if (lower(value) == "true") return true;
    if (lower(value) == "false") return false;
    return value;
  }
  const Json parsed = Json::parse(value, nullptr, false);  // object, array, or no type given
  return parsed.is_discarded() ? Json(value) : parsed;
}

// "<function=NAME>" (or "<parameter=NAME>") at the start of `text`, spaces before it allowed.
enum class TagState { kMatched, kNeedMore, kMismatch };
TagState read_named_tag(std::string_view text, std::string_view opener, std::string& name, size_t& length) {
  size_t i = 0;
  while (i < text.size() && is_space(text[i])) ++i;
  const std::string_view rest = text.substr(i);
  const size_t n = std::min(rest.size(), opener.size());
  if (rest.substr(0, n) != opener.substr(0, n)) return TagState::kMismatch;
  if (n < opener.size()) return TagState::kNeedMore;
  const size_t close = rest.find('>', opener.size());
  if (close == std::string_view::npos)
    return rest.size() - opener.size() > kMaxNameBytes || rest.find('\n', opener.size()) != std::string_view::npos
               ? TagState::kMismatch
               : TagState::kNeedMore;
  name = std::string(rest.substr(opener.size(), close - opener.size()));
  length = i + close + 1;
  return name.empty() ? TagState::kMismatch : TagState::kMatched;
}

class Qwen3CoderParser final : public PendingTextParser {
 public:
  Qwen3CoderParser(const Json& tools, ToolCallIdFn new_id) : PendingTextParser(std::move(new_id)), tools_(tools) {}

 private:
  enum class State { kText, kFunction, kParameters, kValue, kClose };

  bool read_function(bool final, MessageDelta& out) {
    size_t length = 0;
    TagState tag = read_named_tag(pending_, kFunctionStart, function_, length);
    if (tag == TagState::kNeedMore && !final) return false;
    if (tag != TagState::kMatched) {  // not a call: the tag is content
      sink_.text(kCallStart, out);
      state_ = State::kText;
      return true;
    }
    sink_.before_call();
    out.add_tool_piece({index_, new_id_(), function_, ""});
    pending_.erase(0, length);
    num_parameters_ = 0;
    state_ = State::kParameters;
    return true;
  }

  void end_call(MessageDelta& out) {
    out.add_tool_piece({index_, "", "", num_parameters_ == 0 ? "{}" : "}"});
    sink_.after_call();
    ++index_;
  }

  bool read_parameters(bool final, MessageDelta& out) {
    size_t length = 0;
    const TagState parameter = read_named_tag(pending_, kParameterStart, parameter_, length);
    if (parameter == TagState::kMatched) {
      pending_.erase(0, length);
      state_ = State::kValue;
      return true;
    }
    const TagMatch end = consume_tag(pending_, kFunctionEnd, final);
    if (end == TagMatch::kFound || final) {
      end_call(out);
      state_ = State::kClose;
      return true;
    }
    if (end == TagMatch::kNeedMore || parameter == TagState::kNeedMore) return false;
    // Stray text between parameters: skipped up to the next tag.
    const size_t next = pending_.find('<', 1);
    pending_.erase(0, next == std::string::npos ? pending_.size() : next);
    return !pending_.empty();
  }

  void emit_parameter(std::string value, MessageDelta& out) {
    // The template writes "\n" after the opening tag and before the closing one.
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    const Json converted = convert_value(value, parameter_type(tools_, function_, parameter_));
    std::string piece = num_parameters_++ == 0 ? "{" : ", ";
    piece += Json(parameter_).dump() + ": " + converted.dump();
    out.add_tool_piece({index_, "", "", std::move(piece)});
  }

  bool read_value(bool final, MessageDelta& out) {
    size_t end = pending_.find(kParameterEnd);
    size_t skip = kParameterEnd.size();
    if (end == std::string::npos && !final) return false;  // values may hold any text, tags included
    if (end == std::string::npos) {  // at the end, a missing </parameter> before </function> is forgiven
      end = std::min(pending_.find(kFunctionEnd), pending_.size());
      skip = 0;
    }
    emit_parameter(pending_.substr(0, end), out);
    pending_.erase(0, std::min(pending_.size(), end + skip));
    state_ = State::kParameters;
    return true;
  }

  void run(bool final, MessageDelta& out) override {
    for (bool more = true; more;) {
      switch (state_) {
        case State::kText:
          more = scan_to_marker(pending_, kCallStart, final, sink_, out);
          if (more) state_ = State::kFunction;
          break;
        case State::kFunction: more = read_function(final, out); break;
        case State::kParameters: more = read_parameters(final, out); break;
        case State::kValue: more = read_value(final, out); break;
        case State::kClose:
          more = consume_tag(pending_, kCallEnd, final) != TagMatch::kNeedMore;
          if (more) state_ = State::kText;
          break;
      }
    }
  }

  Json tools_;
  State state_ = State::kText;
  std::string function_;
  std::string parameter_;
  int num_parameters_ = 0;
};

}  // namespace

std::unique_ptr<OutputParser> make_qwen3_coder_parser(const Json& tools, ToolCallIdFn new_id) {
  return std::make_unique<Qwen3CoderParser>(tools, std::move(new_id));
}

}  // namespace pagellm::server
