// `--dataset multi-turn`: conversations whose turns resend the history, to measure what prefix
// caching buys. Every conversation opens with the same system prompt (system_len tokens of random
// text), then `turns` user messages of random text, made as the random dataset makes them. Turn k
// sends the system prompt, the k−1 earlier user messages with the model's actual answers, and
// user message k:
//   chat:        messages = [system, user 1, assistant 1, ..., user k]
//   completions: one text, system "\n\n" user 1 answer 1 "\n\n" user 2 ...: each turn's prompt
//                extends the previous prompt and its answer, so the whole history can hit the cache.
// Turn k+1 is made from turn k's answer when it arrives (FollowUps), so the turns of one
// conversation never overlap. A failed turn ends its conversation; notes() counts the turns not sent.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_tokenizer.h"
#include "bench/dataset.h"
#include "bench/openai_stream.h"
#include "bench/serve_runner.h"
#include "core/status.h"

namespace pagellm::bench {

struct MultiTurnOptions {
  int num_conversations = 1000;  // --num-prompts
  int turns = 4;
  int system_len = 256;          // tokens of the shared system prompt (0: none)
  int input_len = 1024;          // tokens of each new user message
  int output_len = 128;          // max_tokens of each turn
  double range_ratio = 0.0;      // as the random dataset's, for input and output lengths
  uint64_t seed = 0;
  int vocab_size = 0;            // as the random dataset's
  Endpoint endpoint = Endpoint::kChatCompletions;
};

class MultiTurnConversations : public FollowUps {
 public:
  static Expected<std::unique_ptr<MultiTurnConversations>> make(const MultiTurnOptions& options,
                                                                const BenchTokenizer* tokenizer);

  // Turn 1 of every conversation, in conversation order: what the arrival schedule paces.
  std::vector<BenchRequest> first_turns() const;
  std::optional<BenchRequest> next(const BenchRequest& finished, const RequestRecord& record,
                                   const std::string& answer_text) override;
  int num_planned() const override;
  // Dataset caveats, and the turns not sent because an earlier turn of theirs failed.
  std::vector<std::string> notes() const;

 private:
  struct Turn {
    std::string user_text;
    int user_len = 0;    // tokens
    int output_len = 0;  // max_tokens
  };
  MultiTurnConversations() = default;

  MultiTurnOptions options_;
  std::string system_text_;
  int system_len_ = 0;
  std::vector<std::vector<Turn>> turns_;  // [conversation][turn − 1]
  std::vector<std::string> dataset_notes_;
  int num_turns_not_sent_ = 0;
};

}  // namespace pagellm::bench
