// The families whose calls are JSON objects:
//   hermes       Qwen2.5 / Qwen3:  text <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call> ...
//   llama3_json  Llama 3.1+:       [<|python_tag|>]{"name": "f", "parameters": {...}}[; {...}]  (at the start only)
//   mistral      Mistral:          text [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
//                                  text [TOOL_CALLS]f[ARGS]{...}[TOOL_CALLS]g[ARGS]{...}   (tokenizer v11+)
#include <cctype>

#include "server/tool_parser_families.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t first_non_space(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && is_space(text[i])) ++i;
  return i;
}

}  // namespace

// ---- JsonCallReader ----

void JsonCallReader::start_arguments(char first, int index, const ToolCallIdFn& new_id, MessageDelta& out,
                                     std::string& piece) {
  CallHeader header = match_call_header(held_);
  out.add_tool_piece({index, new_id(), header.name, ""});
  emitted_ = true;
  held_.clear();
  phase_ = Phase::kArguments;
  arguments_.feed(first);
  if (arguments_.is_string()) string_arguments_ += first;
  else piece += first;
}

void JsonCallReader::end_whole(int index, const ToolCallIdFn& new_id, MessageDelta& out) {
  std::optional<ToolCall> call = parse_call_object(held_);
  if (!call) {
    status_ = Status::kNotACall;
    return;
  }
  out.add_tool_piece({index, new_id(), call->name, call->arguments});
  emitted_ = true;
  held_.clear();
  status_ = Status::kCall;
}

size_t JsonCallReader::feed(std::string_view text, int index, const ToolCallIdFn& new_id, MessageDelta& out) {
  std::string piece;  // arguments text of this feed
  size_t i = 0;
  for (; i < text.size() && status_ == Status::kReading; ++i) {
    const char c = text[i];
    if (!object_.started() && !is_space(c) && c != '{') {
      status_ = Status::kNotACall;  // c is not ours
      break;
    }
    object_.feed(c);
    switch (phase_) {
      case Phase::kHead: {
        held_ += c;
        if (object_.done()) {
          end_whole(index, new_id, out);
          break;
        }
        const CallHeader::Match match = match_call_header(held_).match;
        if (match == CallHeader::Match::kMatched) start_arguments(c, index, new_id, out, piece);
        else if (match == CallHeader::Match::kMismatch) phase_ = Phase::kWhole;
        break;
      }
      case Phase::kArguments:
        if (arguments_.feed(c)) {
          if (arguments_.is_string()) string_arguments_ += c;
          else piece += c;
        }
        if (arguments_.done()) {
          if (arguments_.is_string()) {
            const Json unwrapped = Json::parse(string_arguments_, nullptr, false);
            piece += unwrapped.is_string() ? unwrapped.get<std::string>() : string_arguments_;
          }
          phase_ = Phase::kTail;
        }
        if (object_.done()) status_ = Status::kCall;
        break;
      case Phase::kTail:  // other keys after the arguments: read past them
        if (object_.done()) status_ = Status::kCall;
        break;
      case Phase::kWhole:
        held_ += c;
        if (object_.done()) end_whole(index, new_id, out);
        break;
    }
  }
  if (!piece.empty()) out.add_tool_piece({index, "", "", std::move(piece)});
  return i;
}

void JsonCallReader::finish(int index, const ToolCallIdFn& new_id, MessageDelta& out) {
  if (status_ != Status::kReading) return;
  if (phase_ == Phase::kHead || phase_ == Phase::kWhole) {
    end_whole(index, new_id, out);  // an unfinished object does not parse: not a call
    return;
  }
  if (phase_ == Phase::kArguments && arguments_.is_string() && !string_arguments_.empty())
    out.add_tool_piece({index, "", "", string_arguments_});  // cut short: as written
  status_ = Status::kCall;
}

JsonCallReader::Status PendingTextParser::read_json_call(bool final, MessageDelta& out) {
  pending_.erase(0, reader_.feed(pending_, index_, new_id_, out));
  if (reader_.status() == JsonCallReader::Status::kReading) {
    if (reader_.emitted_call()) sink_.before_call();
    if (!final) return JsonCallReader::Status::kReading;
    reader_.finish(index_, new_id_, out);
  }
  if (reader_.status() == JsonCallReader::Status::kCall) {
    sink_.before_call();
    sink_.after_call();
    ++index_;
  }
  return reader_.status();
}

namespace {

// ---- hermes ----

class HermesParser final : public PendingTextParser {
 public:
  explicit HermesParser(ToolCallIdFn new_id) : PendingTextParser(std::move(new_id)) {}

 private:
  static constexpr std::string_view kStart = "<tool_call>";
  static constexpr std::string_view kEnd = "</tool_call>";
  enum class State { kText, kCall, kClose };

  void run(bool final, MessageDelta& out) override {
    for (;;) {
      switch (state_) {
        case State::kText:
          if (!scan_to_marker(pending_, kStart, final, sink_, out)) return;
          state_ = State::kCall;
          reader_ = JsonCallReader();
          break;
        case State::kCall: {
          const JsonCallReader::Status status = read_json_call(final, out);
          if (status == JsonCallReader::Status::kReading) return;
          if (status == JsonCallReader::Status::kCall) {
            state_ = State::kClose;
          } else {
            sink_.text(std::string(kStart) + reader_.held_text(), out);
            state_ = State::kText;
          }
          break;
        }
        case State::kClose:
          if (consume_tag(pending_, kEnd, final) == TagMatch::kNeedMore) return;
          state_ = State::kText;
          break;
      }
    }
  }

  State state_ = State::kText;
};

// ---- llama3_json ----

class Llama3JsonParser final : public PendingTextParser {
 public:
  explicit Llama3JsonParser(ToolCallIdFn new_id) : PendingTextParser(std::move(new_id)) {}

 private:
  // Special in Llama 3's tokenizer: present only when special tokens are kept.
  static constexpr std::string_view kPythonTag = "<|python_tag|>";
  enum class State { kStart, kCall, kBetween, kText };

  // Calls come first or not at all: the output opens with the tag or with "{".
  bool decide_start(bool final) {
    if (pending_.rfind(kPythonTag, 0) == 0) {
      pending_.erase(0, kPythonTag.size());
      prefix_ = kPythonTag;
      state_ = State::kCall;
      return true;
    }
    if (!final && !pending_.empty() && kPythonTag.substr(0, pending_.size()) == pending_) return false;
    const size_t start = first_non_space(pending_);
    if (start == pending_.size() && !final) return false;
    state_ = start < pending_.size() && pending_[start] == '{' ? State::kCall : State::kText;
    return true;
  }

  void run(bool final, MessageDelta& out) override {
    for (;;) {
      switch (state_) {
        case State::kStart:
          if (!decide_start(final)) return;
          reader_ = JsonCallReader();
          break;
        case State::kCall: {
          const JsonCallReader::Status status = read_json_call(final, out);
          if (status == JsonCallReader::Status::kReading) return;
          if (status == JsonCallReader::Status::kCall) {
            state_ = State::kBetween;
          } else {
            sink_.text(prefix_ + reader_.held_text(), out);
            state_ = State::kText;
          }
          prefix_.clear();
          break;
        }
        case State::kBetween: {  // "; " joins calls; anything else is content
          const size_t next = first_non_space(pending_);
          if (next == pending_.size() && !final) return;
          if (next < pending_.size() && pending_[next] == ';') {
            pending_.erase(0, next + 1);
            reader_ = JsonCallReader();
            state_ = State::kCall;
          } else {
            state_ = State::kText;
          }
          break;
        }
        case State::kText:
          sink_.text(pending_, out);
          pending_.clear();
          return;
      }
    }
  }

  std::string prefix_;  // the tag before the call being read (content again if it is not a call)
  State state_ = State::kStart;
};

// ---- mistral ----

class MistralParser final : public PendingTextParser {
 public:
  explicit MistralParser(ToolCallIdFn new_id) : PendingTextParser(std::move(new_id)) {}

 private:
  static constexpr std::string_view kMarker = "[TOOL_CALLS]";
  static constexpr std::string_view kArgs = "[ARGS]";
  static constexpr size_t kMaxNameBytes = 256;
  enum class State { kText, kAfterMarker, kItem, kItemSeparator, kName, kNamedArguments };

  static bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }

  // The marker turned out not to start calls: what was held since it is content.
  void not_calls(MessageDelta& out) {
    sink_.text(raw_, out);
    raw_.clear();
    state_ = State::kText;
  }

  bool after_marker(bool final, MessageDelta& out) {
    const size_t next = first_non_space(pending_);
    if (next == pending_.size()) {
      if (final) not_calls(out);
      return final;
    }
    const char c = pending_[next];
    raw_ += pending_.substr(0, next + (c == '[' ? 1 : 0));
    pending_.erase(0, next + (c == '[' ? 1 : 0));
    in_array_ = c == '[';
    reader_ = JsonCallReader();
    state_ = c == '[' || c == '{' ? State::kItem : State::kName;
    return true;
  }

  bool read_item(bool final, MessageDelta& out) {
    const JsonCallReader::Status status = read_json_call(final, out);
    if (status == JsonCallReader::Status::kReading) return false;
    if (status == JsonCallReader::Status::kCall) {
      raw_.clear();
      state_ = in_array_ ? State::kItemSeparator : State::kText;
    } else {
      raw_ += reader_.held_text();
      not_calls(out);
    }
    return true;
  }

  bool item_separator(bool final) {
    const size_t next = first_non_space(pending_);
    if (next == pending_.size()) {
      if (final) state_ = State::kText;
      return final;
    }
    if (pending_[next] == ',') {
      pending_.erase(0, next + 1);
      reader_ = JsonCallReader();
      state_ = State::kItem;
    } else {
      if (pending_[next] == ']') pending_.erase(0, next + 1);
      state_ = State::kText;
    }
    return true;
  }

  // v11+: the name runs up to [ARGS].
  bool read_name(bool final, MessageDelta& out) {
    const size_t args = pending_.find(kArgs);
    const size_t name_end = args != std::string::npos ? args : pending_.size() - partial_marker_suffix(pending_, kArgs);
    size_t begin = first_non_space(pending_);
    size_t end = name_end;
    while (end > begin && is_space(pending_[end - 1])) --end;
    bool valid = end - begin <= kMaxNameBytes;
    for (size_t i = begin; valid && i < end; ++i) valid = is_name_char(pending_[i]);
    if (!valid || (args == std::string::npos && final) || (args != std::string::npos && end == begin)) {
      not_calls(out);
      return true;
    }
    if (args == std::string::npos) return false;
    sink_.before_call();
    out.add_tool_piece({index_, new_id_(), pending_.substr(begin, end - begin), ""});
    pending_.erase(0, args + kArgs.size());
    raw_.clear();
    arguments_ = JsonValueScanner();
    state_ = State::kNamedArguments;
    return true;
  }

  bool read_named_arguments(bool final, MessageDelta& out) {
    size_t used = 0;
    while (used < pending_.size() && !arguments_.done() && arguments_.feed(pending_[used])) ++used;
    if (used > 0) out.add_tool_piece({index_, "", "", pending_.substr(0, used)});
    pending_.erase(0, used);
    if (!arguments_.done() && !final) return false;
    sink_.after_call();
    ++index_;
    state_ = State::kText;
    return true;
  }

  void run(bool final, MessageDelta& out) override {
    for (bool more = true; more;) {
      switch (state_) {
        case State::kText:
          more = scan_to_marker(pending_, kMarker, final, sink_, out);
          if (more) {
            raw_ = kMarker;
            state_ = State::kAfterMarker;
          }
          break;
        case State::kAfterMarker: more = after_marker(final, out); break;
        case State::kItem: more = read_item(final, out); break;
        case State::kItemSeparator: more = item_separator(final); break;
        case State::kName: more = read_name(final, out); break;
        case State::kNamedArguments: more = read_named_arguments(final, out); break;
      }
    }
  }

  std::string raw_;  // consumed since the marker while undecided
  State state_ = State::kText;
  bool in_array_ = false;
  JsonValueScanner arguments_;
};

}  // namespace

std::unique_ptr<OutputParser> make_hermes_parser(ToolCallIdFn new_id) {
  return std::make_unique<HermesParser>(std::move(new_id));
}
std::unique_ptr<OutputParser> make_llama3_json_parser(ToolCallIdFn new_id) {
  return std::make_unique<Llama3JsonParser>(std::move(new_id));
}
std::unique_ptr<OutputParser> make_mistral_parser(ToolCallIdFn new_id) {
  return std::make_unique<MistralParser>(std::move(new_id));
}

}  // namespace pagellm::server
