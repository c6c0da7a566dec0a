#include "bench/bench_tokenizer.h"

#include <cctype>

#include "tokenizer/tokenizer.h"

namespace pagellm::bench {

namespace {

class HfBenchTokenizer : public BenchTokenizer {
 public:
  explicit HfBenchTokenizer(std::shared_ptr<const Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}

  // Special tokens are added as vLLM's datasets count them (tokenizer(prompt).input_ids).
  int count_tokens(std::string_view text) const override {
    auto ids = tokenizer_->encode(text, /*add_special_tokens=*/true);
    // encode() fails only on text the tokenizer cannot represent; a word count keeps the
    // dataset usable and the lengths close.
    return ids.has_value() ? static_cast<int>(ids->size()) : count_words(text);
  }
  // Random ids may hit special tokens; they are dropped so chat text carries no control tokens.
  std::string decode(const std::vector<int32_t>& token_ids) const override {
    return tokenizer_->decode(token_ids, /*skip_special_tokens=*/true);
  }
  // The ids random prompts draw from: all of them but a tail of special added tokens (Gemma 3's
  // tokenizer ends with <image_soft_token> at 262144, one past the text model's vocabulary), as
  // vLLM's random dataset draws below the tokenizer's base vocabulary.
  int vocab_size() const override {
    int64_t size = tokenizer_->vocab_size();
    while (size > 1 && tokenizer_->is_special(static_cast<int32_t>(size - 1))) --size;
    return static_cast<int>(size);
  }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
};

}  // namespace

Expected<std::unique_ptr<BenchTokenizer>> load_bench_tokenizer(const std::string& dir) {
  auto tokenizer = Tokenizer::from_dir(dir);
  if (!tokenizer.has_value()) {
    return Status(tokenizer.status().code(),
                  "[bench] --tokenizer '" + dir + "': " + tokenizer.status().message());
  }
  return std::unique_ptr<BenchTokenizer>(std::make_unique<HfBenchTokenizer>(std::move(tokenizer).value()));
}

int count_words(std::string_view text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    bool is_space = std::isspace(static_cast<unsigned char>(c)) != 0;
    if (!is_space && !in_word) ++words;
    in_word = !is_space;
  }
  return words;
}

}  // namespace pagellm::bench
