// What the bench needs from a tokenizer: token counts (ShareGPT lengths) and decoding (random
// prompts sent as text). An interface so the datasets can be tested without a real tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagellm::bench {

class BenchTokenizer {
 public:
  virtual ~BenchTokenizer() = default;
  virtual int count_tokens(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& token_ids) const = 0;
  virtual int vocab_size() const = 0;
};

// Loads tokenizer.json (+ tokenizer_config.json) from a Hugging Face model directory.
Expected<std::unique_ptr<BenchTokenizer>> load_bench_tokenizer(const std::string& dir);

// Without a tokenizer, lengths are approximated by counting whitespace-separated words.
int count_words(std::string_view text);

}  // namespace pagellm::bench
