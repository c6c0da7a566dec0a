// The prompts a benchmark sends, as vLLM's `bench serve` makes them:
//  - random:   prompts of uniformly random token ids; input and output lengths drawn uniformly from
//              [len·(1−r), len·(1+r)] (r = range ratio), all from one seed.
//  - mixed:    random prompts whose lengths take each of a few classes (default 8000, 3000, 512,
//              128 and 64 tokens) equally often, in a seeded shuffled order: long prompts arriving
//              among short ones, the load where a scheduler must keep short prompts' TTFT low.
//  - sharegpt: a JSON list of {"conversations":[{"from":"human","value":...},{"from":"gpt",...}]};
//              first turn = prompt, second turn's token length = output length; shuffled by the
//              seed; pairs dropped when prompt or output < 4 tokens, prompt > 1024 or total > 2048.
// Token lengths come from the tokenizer when one is given; without one they are approximated by
// whitespace-separated word counts, and Dataset::notes says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_tokenizer.h"
#include "core/status.h"

namespace pagellm::bench {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

struct BenchRequest {
  std::string prompt_text;                // sent as text when prompt_token_ids is empty
  std::vector<int32_t> prompt_token_ids;  // sent as an id array ("prompt": [..]) when non-empty
  int prompt_len = 0;                     // tokens (approximate when Dataset::notes says so)
  int output_len = 0;                     // becomes max_tokens
  std::vector<ChatMessage> history;       // chat: messages sent before the user's prompt_text
  int conversation = -1;                  // multi-turn: which conversation, -1 otherwise
  int turn = 0;                           // multi-turn: 1-based turn index, 0 otherwise
  int input_class = 0;                    // mixed: the prompt length of its class, 0 otherwise
};

struct Dataset {
  std::vector<BenchRequest> requests;
  std::vector<std::string> notes;  // caveats the report prints (approximate lengths, repeats)
};

struct RandomDatasetOptions {
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;  // in [0, 1)
  uint64_t seed = 0;
  int vocab_size = 0;        // 0: the tokenizer's, else kDefaultRandomVocabSize
  bool as_text = false;      // chat endpoints need text, not ids
};

// Ids below this exist in every real vocabulary, so id prompts are valid for any model.
inline constexpr int kDefaultRandomVocabSize = 1000;

Expected<Dataset> make_random_dataset(const RandomDatasetOptions& options,
                                      const BenchTokenizer* tokenizer);

struct MixedDatasetOptions {
  RandomDatasetOptions random;   // num_prompts, output_len, seed, vocab_size, as_text (input_len unused)
  std::vector<int> input_lens = {8000, 3000, 512, 128, 64};
};

Expected<Dataset> make_mixed_dataset(const MixedDatasetOptions& options, const BenchTokenizer* tokenizer);

struct ShareGptOptions {
  std::string path;
  int num_prompts = 1000;
  uint64_t seed = 0;
  std::optional<int> fixed_output_len;  // replaces the second turn's length (and its < 4 check)
};

inline constexpr int kShareGptMinTokens = 4;
inline constexpr int kShareGptMaxPromptTokens = 1024;
inline constexpr int kShareGptMaxTotalTokens = 2048;

Expected<Dataset> load_sharegpt_dataset(const ShareGptOptions& options,
                                        const BenchTokenizer* tokenizer);

// vLLM's is_valid_sequence for ShareGPT pairs.
bool is_valid_sharegpt_pair(int prompt_len, int output_len, bool skip_output_len_check);

}  // namespace pagellm::bench
