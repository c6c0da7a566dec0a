#include "bench/multi_turn.h"

namespace pagellm::bench {

namespace {

// Between the system prompt and the first user message, and before each later user message.
constexpr const char* kCompletionTurnSeparator = "\n\n";

// Random text as the random dataset makes it (decoded ids, or filler words without a tokenizer).
Expected<Dataset> random_texts(int count, int input_len, int output_len, double range_ratio, uint64_t seed,
                               int vocab_size, const BenchTokenizer* tokenizer) {
  RandomDatasetOptions random;
  random.num_prompts = count;
  random.input_len = input_len;
  random.output_len = output_len;
  random.range_ratio = range_ratio;
  random.seed = seed;
  random.vocab_size = vocab_size;
  random.as_text = true;  // answers are text, so the history is text on both endpoints
  return make_random_dataset(random, tokenizer);
}

}  // namespace

Expected<std::unique_ptr<MultiTurnConversations>> MultiTurnConversations::make(
    const MultiTurnOptions& options, const BenchTokenizer* tokenizer) {
  if (options.turns < 1) return invalid_argument("[bench] --multi-turn-turns must be ≥ 1, got {}", options.turns);
  if (options.system_len < 0) {
    return invalid_argument("[bench] --multi-turn-system-len must be ≥ 0, got {}", options.system_len);
  }
  if (options.num_conversations < 1) return invalid_argument("[bench] --num-prompts must be ≥ 1");
  std::unique_ptr<MultiTurnConversations> conversations(new MultiTurnConversations());
  conversations->options_ = options;
  // The user messages draw from the seed itself, as the random dataset would; the system prompt
  // from the next seed, so it is not a copy of the first user message.
  PAGELLM_ASSIGN_OR_RETURN(
      Dataset users, random_texts(options.num_conversations * options.turns, options.input_len, options.output_len,
                                  options.range_ratio, options.seed, options.vocab_size, tokenizer));
  if (options.system_len > 0) {
    PAGELLM_ASSIGN_OR_RETURN(Dataset system, random_texts(1, options.system_len, 1, 0.0, options.seed + 1,
                                                          options.vocab_size, tokenizer));
    conversations->system_text_ = std::move(system.requests[0].prompt_text);
    conversations->system_len_ = system.requests[0].prompt_len;
  }
  conversations->turns_.resize(options.num_conversations);
  for (int i = 0; i < static_cast<int>(users.requests.size()); ++i) {
    BenchRequest& user = users.requests[i];
    conversations->turns_[i / options.turns].push_back({std::move(user.prompt_text), user.prompt_len, user.output_len});
  }
  conversations->dataset_notes_ = std::move(users.notes);
  return conversations;
}

std::vector<BenchRequest> MultiTurnConversations::first_turns() const {
  const bool is_chat = options_.endpoint == Endpoint::kChatCompletions;
  std::vector<BenchRequest> requests;
  for (int c = 0; c < static_cast<int>(turns_.size()); ++c) {
    const Turn& turn = turns_[c][0];
    BenchRequest request;
    if (is_chat) {
      if (!system_text_.empty()) request.history.push_back({"system", system_text_});
      request.prompt_text = turn.user_text;
    } else {
      request.prompt_text = system_text_.empty() ? turn.user_text
                                                 : system_text_ + kCompletionTurnSeparator + turn.user_text;
    }
    request.prompt_len = system_len_ + turn.user_len;
    request.output_len = turn.output_len;
    request.conversation = c;
    request.turn = 1;
    requests.push_back(std::move(request));
  }
  return requests;
}

std::optional<BenchRequest> MultiTurnConversations::next(const BenchRequest& finished, const RequestRecord& record,
                                                         const std::string& answer_text) {
  if (finished.conversation < 0 || finished.turn >= options_.turns) return std::nullopt;
  if (!record.success) {
    num_turns_not_sent_ += options_.turns - finished.turn;
    return std::nullopt;
  }
  const Turn& turn = turns_[finished.conversation][finished.turn];  // turn index finished.turn + 1
  BenchRequest request;
  if (options_.endpoint == Endpoint::kChatCompletions) {
    request.history = finished.history;
    request.history.push_back({"user", finished.prompt_text});
    request.history.push_back({"assistant", answer_text});
    request.prompt_text = turn.user_text;
  } else {
    request.prompt_text = finished.prompt_text + answer_text + kCompletionTurnSeparator + turn.user_text;
  }
  // The answer's length is the server's count; the chat template's tokens are not counted.
  request.prompt_len = finished.prompt_len + static_cast<int>(record.output_tokens) + turn.user_len;
  request.output_len = turn.output_len;
  request.conversation = finished.conversation;
  request.turn = finished.turn + 1;
  return request;
}

int MultiTurnConversations::num_planned() const {
  return static_cast<int>(turns_.size()) * (options_.turns - 1);
}

std::vector<std::string> MultiTurnConversations::notes() const {
  std::vector<std::string> notes = dataset_notes_;
  if (num_turns_not_sent_ > 0) {
    notes.push_back(fmt::format("multi-turn: {} turns not sent because an earlier turn of their conversation failed",
                                num_turns_not_sent_));
  }
  return notes;
}

}  // namespace pagellm::bench
