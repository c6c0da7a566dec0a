// openai: gpt-oss's harmony format. The output is a run of messages, each a header and a body:
//
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>The answer.<|return|>
//
// analysis bodies are reasoning, final (and commentary without a recipient) bodies are content, a
// body addressed "to=functions.NAME" is a call whose arguments are the body. The recipient may
// also stand before the channel ("<|start|>assistant to=functions.f<|channel|>commentary json").
// These are special tokens: the detokenizer keeps them for this parser. The last stop token
// (<|call|>, <|return|>) is not in the text; the body then ends with the output.
#include <array>

#include "server/tool_parser_families.h"

namespace pagellm::server {

namespace {

constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
constexpr size_t kMaxHeaderBytes = 512;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// `text` starts with `tag`, or is the start of it.
bool opens_with(std::string_view text, std::string_view tag) {
  const size_t n = std::min(text.size(), tag.size());
  return text.substr(0, n) == tag.substr(0, n);
}

// The word after `key` in a header, up to a space or the next special token.
std::string header_word(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return "";
  size_t begin = at + key.size();
  while (begin < header.size() && is_space(header[begin])) ++begin;
  size_t end = begin;
  while (end < header.size() && !is_space(header[end]) && header.compare(end, 2, "<|") != 0) ++end;
  return std::string(header.substr(begin, end - begin));
}

class HarmonyParser final : public PendingTextParser {
 public:
  HarmonyParser(bool extract_tools, ToolCallIdFn new_id) : PendingTextParser(std::move(new_id)), extract_tools_(extract_tools) {}

 private:
  enum class Body { kReasoning, kContent, kCall };
  enum class State { kHeader, kBody };

  void start_body(std::string_view header, MessageDelta& out) {
    const std::string channel = header_word(header, kChannel);
    const std::string recipient = header_word(header, "to=");
    body_ = Body::kContent;
    if (extract_tools_ && recipient.rfind("functions.", 0) == 0 && recipient.size() > 10) {
      body_ = Body::kCall;
      out.add_tool_piece({index_, new_id_(), recipient.substr(10), ""});
    } else if (channel == "analysis") {
      body_ = Body::kReasoning;
    }
    state_ = State::kBody;
  }

  bool read_header(bool final, MessageDelta& out) {
    const size_t message = pending_.find(kMessage);
    if (message != std::string::npos) {
      start_body(std::string_view(pending_).substr(0, message), out);
      pending_.erase(0, message + kMessage.size());
      return true;
    }
    // Text that cannot be a header (a model that skips the format) is content.
    const bool may_be_header = opens_with(pending_, kChannel) || opens_with(pending_, kStart);
    if (pending_.empty() || (may_be_header && !final && pending_.size() <= kMaxHeaderBytes)) return false;
    if (!may_be_header || pending_.size() > kMaxHeaderBytes) {
      body_ = Body::kContent;
      state_ = State::kBody;
      return true;
    }
    pending_.clear();  // a header cut off by the end of the output has no body
    return false;
  }

  void emit(std::string_view text, MessageDelta& out) {
    if (text.empty()) return;
    if (body_ == Body::kReasoning) out.reasoning += text;
    else if (body_ == Body::kContent) out.content += text;
    else out.add_tool_piece({index_, "", "", std::string(text)});
  }

  bool read_body(bool final, MessageDelta& out) {
    size_t end = std::string::npos;
    std::string_view marker;
    for (std::string_view candidate : kBodyEnds) {
      const size_t at = pending_.find(candidate);
      if (at < end) {
        end = at;
        marker = candidate;
      }
    }
    if (end == std::string::npos) {
      size_t hold = 0;
      if (!final)
        for (std::string_view candidate : kBodyEnds) hold = std::max(hold, partial_marker_suffix(pending_, candidate));
      emit(std::string_view(pending_).substr(0, pending_.size() - hold), out);
      pending_.erase(0, pending_.size() - hold);
      if (final && body_ == Body::kCall) ++index_;
      return false;
    }
    emit(std::string_view(pending_).substr(0, end), out);
    // <|start|> opens the next header: it stays for read_header.
    pending_.erase(0, end + (marker == kStart ? 0 : marker.size()));
    if (body_ == Body::kCall) ++index_;
    state_ = State::kHeader;
    return true;
  }

  void run(bool final, MessageDelta& out) override {
    for (bool more = true; more;) more = state_ == State::kHeader ? read_header(final, out) : read_body(final, out);
  }

  bool extract_tools_;
  State state_ = State::kHeader;
  Body body_ = Body::kContent;
};

}  // namespace

std::unique_ptr<OutputParser> make_harmony_parser(bool extract_tools, ToolCallIdFn new_id) {
  if (!new_id) new_id = [] { return random_tool_call_id(); };
  return std::make_unique<HarmonyParser>(extract_tools, std::move(new_id));
}

}  // namespace pagellm::server
