#include "server/tool_parser.h"

#include <algorithm>
#include <random>

#include "server/tool_parser_families.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace

void MessageDelta::add_tool_piece(ToolCallDelta piece) {
  // A piece of the call the last piece belongs to extends it (one delta per call per feed).
  if (!tool_calls.empty() && tool_calls.back().index == piece.index && piece.id.empty()) {
    tool_calls.back().arguments += piece.arguments;
    return;
  }
  tool_calls.push_back(std::move(piece));
}

void MessageDelta::append(const MessageDelta& other) {
  reasoning += other.reasoning;
  content += other.content;
  for (const ToolCallDelta& piece : other.tool_calls) add_tool_piece(piece);
}

void ParsedMessage::apply(const MessageDelta& delta) {
  reasoning += delta.reasoning;
  content += delta.content;
  for (const ToolCallDelta& piece : delta.tool_calls) {
    while (tool_calls.size() <= static_cast<size_t>(piece.index)) tool_calls.emplace_back();
    ToolCall& call = tool_calls[static_cast<size_t>(piece.index)];
    if (!piece.id.empty()) call.id = piece.id;
    if (!piece.name.empty()) call.name = piece.name;
    call.arguments += piece.arguments;
  }
}

ParsedMessage parse_whole(OutputParser& parser, std::string_view text) {
  MessageDelta delta;
  parser.feed(text, delta);
  parser.finish(delta);
  ParsedMessage message;
  message.apply(delta);
  return message;
}

std::string random_alphanumeric(size_t length) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string text;
  for (size_t i = 0; i < length; ++i) text.push_back(kAlphabet[pick(rng)]);
  return text;
}

std::string random_tool_call_id() { return "call_" + random_alphanumeric(24); }

const std::vector<std::string>& tool_parser_names() {
  static const std::vector<std::string> names = {"hermes", "qwen3_coder", "llama3_json", "mistral", "openai"};
  return names;
}

bool is_tool_parser_name(std::string_view name) {
  const auto& names = tool_parser_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool tool_parser_needs_special_tokens(std::string_view name) { return name == "mistral" || name == "openai"; }

std::unique_ptr<OutputParser> make_tool_parser(std::string_view name, const Json& tools, ToolCallIdFn new_id) {
  if (!new_id) {
    if (name == "mistral") new_id = [] { return random_alphanumeric(9); };
    else new_id = [] { return random_tool_call_id(); };
  }
  if (name == "hermes") return make_hermes_parser(std::move(new_id));
  if (name == "llama3_json") return make_llama3_json_parser(std::move(new_id));
  if (name == "mistral") return make_mistral_parser(std::move(new_id));
  if (name == "qwen3_coder") return make_qwen3_coder_parser(tools, std::move(new_id));
  if (name == "openai") return make_harmony_parser(/*extract_tools=*/true, std::move(new_id));
  return nullptr;
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

bool scan_to_marker(std::string& pending, std::string_view marker, bool final, ContentSink& sink, MessageDelta& out) {
  const size_t found = pending.find(marker);
  if (found != std::string::npos) {
    sink.text(std::string_view(pending).substr(0, found), out);
    pending.erase(0, found + marker.size());
    return true;
  }
  const size_t emit = pending.size() - (final ? 0 : partial_marker_suffix(pending, marker));
  sink.text(std::string_view(pending).substr(0, emit), out);
  pending.erase(0, emit);
  return false;
}

TagMatch consume_tag(std::string& pending, std::string_view tag, bool final) {
  size_t start = 0;
  while (start < pending.size() && is_space(pending[start])) ++start;
  const std::string_view rest = std::string_view(pending).substr(start);
  if (rest.substr(0, tag.size()) == tag) {
    pending.erase(0, start + tag.size());
    return TagMatch::kFound;
  }
  if (!final && rest.size() < tag.size() && tag.substr(0, rest.size()) == rest) return TagMatch::kNeedMore;
  return TagMatch::kAbsent;
}

void ContentSink::text(std::string_view text, MessageDelta& out) {
  std::string s = held_;
  s += text;
  held_.clear();
  size_t begin = 0;
  if (after_call_) {
    while (begin < s.size() && is_space(s[begin])) ++begin;
    if (begin == s.size()) return;
    after_call_ = false;
  }
  size_t end = s.size();
  while (end > begin && is_space(s[end - 1])) --end;
  out.content.append(s, begin, end - begin);
  held_ = s.substr(end);
}

void ContentSink::finish(MessageDelta& out) {
  if (!after_call_) out.content += held_;
  held_.clear();
}

bool JsonValueScanner::feed(char c) {
  if (done_) return false;
  if (!started_) {
    if (is_space(c)) return true;
    started_ = true;
    first_ = c;
    if (c == '{' || c == '[') depth_ = 1;
    else if (c == '"') in_string_ = true;
    return true;
  }
  if (in_string_) {
    if (escaped_) escaped_ = false;
    else if (c == '\\') escaped_ = true;
    else if (c == '"') {
      in_string_ = false;
      if (first_ == '"') done_ = true;
    }
    return true;
  }
  if (first_ == '{' || first_ == '[') {
    if (c == '"') in_string_ = true;
    else if (c == '{' || c == '[') ++depth_;
    else if ((c == '}' || c == ']') && --depth_ == 0) done_ = true;
    return true;
  }
  // A number or literal ends at the first character that cannot continue it.
  if (is_space(c) || c == ',' || c == '}' || c == ']') {
    done_ = true;
    return false;
  }
  return true;
}

namespace {

// A cursor over a call's head: each expect_* answers "matched", "need more text" or "mismatch".
class HeadCursor {
 public:
  explicit HeadCursor(std::string_view text) : text_(text) {}
  CallHeader::Match skip_space() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
    return pos_ < text_.size() ? CallHeader::Match::kMatched : CallHeader::Match::kNeedMore;
  }
  CallHeader::Match expect(std::string_view literal) {
    if (auto m = skip_space(); m != CallHeader::Match::kMatched) return m;
    const std::string_view rest = text_.substr(pos_);
    const size_t n = std::min(rest.size(), literal.size());
    if (rest.substr(0, n) != literal.substr(0, n)) return CallHeader::Match::kMismatch;
    if (n < literal.size()) return CallHeader::Match::kNeedMore;
    pos_ += literal.size();
    return CallHeader::Match::kMatched;
  }
  // A JSON string; its decoded value goes to `out`.
  CallHeader::Match string(std::string& out) {
    if (auto m = expect("\""); m != CallHeader::Match::kMatched) return m;
    const size_t start = pos_ - 1;
    for (bool escaped = false; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') {
        ++pos_;
        const Json decoded = Json::parse(text_.substr(start, pos_ - start), nullptr, false);
        if (!decoded.is_string()) return CallHeader::Match::kMismatch;
        out = decoded.get<std::string>();
        return CallHeader::Match::kMatched;
      } else if (c == '\n') {
        return CallHeader::Match::kMismatch;
      }
    }
    return CallHeader::Match::kNeedMore;
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

constexpr size_t kMaxHeadBytes = 1024;  // a longer head is read whole (fallback), not streamed

}  // namespace

CallHeader match_call_header(std::string_view text) {
  using Match = CallHeader::Match;
  CallHeader header;
  HeadCursor cursor(text);
  Match m = cursor.expect("{");
  if (m == Match::kMatched) m = cursor.expect("\"name\"");
  if (m == Match::kMatched) m = cursor.expect(":");
  if (m == Match::kMatched) m = cursor.string(header.name);
  if (m == Match::kMatched) m = cursor.expect(",");
  if (m == Match::kMatched) {
    HeadCursor arguments = cursor;
    m = arguments.expect("\"arguments\"");
    if (m == Match::kMismatch) {
      arguments = cursor;
      m = arguments.expect("\"parameters\"");
    }
    cursor = arguments;
  }
  if (m == Match::kMatched) m = cursor.expect(":");
  if (m == Match::kMatched) m = cursor.skip_space();  // the value's first character must be there
  if (m == Match::kMatched && header.name.empty()) m = Match::kMismatch;
  if (m == Match::kNeedMore && text.size() > kMaxHeadBytes) m = Match::kMismatch;
  header.match = m;
  if (m == Match::kMatched) header.length = cursor.pos();
  return header;
}

std::optional<ToolCall> parse_call_object(std::string_view text) {
  const Json object = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object()) return std::nullopt;
  auto name = object.find("name");
  if (name == object.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  ToolCall call;
  call.name = name->get<std::string>();
  auto arguments = object.find("arguments");
  if (arguments == object.end()) arguments = object.find("parameters");
  if (arguments == object.end() || arguments->is_null()) {
    call.arguments = "{}";
  } else if (arguments->is_string()) {
    // Arguments sent as a JSON string holding JSON: the string's text is the arguments.
    const std::string inner = arguments->get<std::string>();
    if (!Json::accept(inner)) return std::nullopt;
    call.arguments = inner;
  } else {
    call.arguments = arguments->dump();
  }
  return call;
}

}  // namespace pagellm::server
