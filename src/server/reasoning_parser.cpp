#include "server/reasoning_parser.h"

#include <algorithm>

#include "server/tool_parser_families.h"

namespace pagellm::server {

namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

class ThinkParser final : public PendingTextParser {
 public:
  // starts_in_reasoning: the output begins inside a think block even without <think>.
  explicit ThinkParser(bool starts_in_reasoning) : starts_in_reasoning_(starts_in_reasoning) {}

 private:
  enum class State { kStart, kReasoning, kAnswerStart, kAnswer };

  bool decide_start(bool final) {
    if (pending_.rfind(kThinkStart, 0) == 0) {
      pending_.erase(0, kThinkStart.size());
      state_ = State::kReasoning;
      return true;
    }
    // An output that starts with </think> closed an empty block (a structured answer's grammar
    // starts after </think>, so a model that skipped the thinking writes just that).
    if (pending_.rfind(kThinkEnd, 0) == 0) {
      state_ = State::kReasoning;
      return true;
    }
    const auto is_prefix_of = [&](std::string_view tag) { return tag.substr(0, pending_.size()) == pending_; };
    if (!final && (is_prefix_of(kThinkStart) || is_prefix_of(kThinkEnd))) return false;  // "<thi" (or nothing yet)
    state_ = starts_in_reasoning_ ? State::kReasoning : State::kAnswer;
    return true;
  }

  bool read_reasoning(bool final, MessageDelta& out) {
    const size_t end = pending_.find(kThinkEnd);
    if (end != std::string::npos) {
      out.reasoning.append(pending_, 0, end);
      pending_.erase(0, end + kThinkEnd.size());
      state_ = State::kAnswerStart;
      return true;
    }
    const size_t emit = pending_.size() - (final ? 0 : partial_marker_suffix(pending_, kThinkEnd));
    out.reasoning.append(pending_, 0, emit);
    pending_.erase(0, emit);
    return false;
  }

  void run(bool final, MessageDelta& out) override {
    for (bool more = true; more;) {
      switch (state_) {
        case State::kStart: more = decide_start(final); break;
        case State::kReasoning: more = read_reasoning(final, out); break;
        case State::kAnswerStart: {
          const auto text = std::find_if(pending_.begin(), pending_.end(), [](char c) { return !is_space(c); });
          pending_.erase(pending_.begin(), text);
          more = !pending_.empty();
          if (more) state_ = State::kAnswer;
          break;
        }
        case State::kAnswer:
          out.content += pending_;
          pending_.clear();
          more = false;
          break;
      }
    }
  }

  bool starts_in_reasoning_;
  State state_ = State::kStart;
};

}  // namespace

const std::vector<std::string>& reasoning_parser_names() {
  static const std::vector<std::string> names = {"qwen3", "deepseek_r1", "openai"};
  return names;
}

bool is_reasoning_parser_name(std::string_view name) {
  const auto& names = reasoning_parser_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool reasoning_parser_needs_special_tokens(std::string_view name) { return name == "openai"; }

bool prompt_opens_think_block(std::string_view prompt) {
  const size_t start = prompt.rfind(kThinkStart);
  if (start == std::string_view::npos) return false;
  const size_t end = prompt.rfind(kThinkEnd);
  return end == std::string_view::npos || end < start;
}

std::unique_ptr<OutputParser> make_reasoning_parser(std::string_view name, std::string_view prompt) {
  if (name == "qwen3") return std::make_unique<ThinkParser>(prompt_opens_think_block(prompt));
  if (name == "deepseek_r1") return std::make_unique<ThinkParser>(/*starts_in_reasoning=*/true);
  if (name == "openai") return make_harmony_parser(/*extract_tools=*/false, {});
  return nullptr;
}

}  // namespace pagellm::server
