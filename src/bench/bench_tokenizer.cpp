#include "bench/bench_tokenizer.h"

#include <cctype>

namespace pagellm::bench {

Expected<std::unique_ptr<BenchTokenizer>> load_bench_tokenizer(const std::string& dir) {
  // The tokenizer library (src/tokenizer) is being written; wire it here when it lands.
  return unimplemented("[bench] --tokenizer not available yet (asked for '{}')", dir);
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
