// A compiled PCRE2 pattern (UTF + UCP, JIT when available) with the matching semantics of the
// Oniguruma regexes Hugging Face tokenizers compiles from tokenizer.json.
//
// One difference is smoothed over at compile time: PCRE2's \s also matches U+180E (Mongolian
// vowel separator), Oniguruma's (Unicode White_Space) does not, so \s and \S are rewritten to an
// explicit White_Space class before compiling.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace pagellm {

class Regex {
 public:
  using Span = std::pair<uint32_t, uint32_t>;  // [begin, end) byte offsets into the subject

  static Expected<std::shared_ptr<const Regex>> compile(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every non-overlapping match of the subject (which must be valid UTF-8), left to
  // right, to `matches`. An empty match advances the search by one character.
  Status find_all(std::string_view subject, std::vector<Span>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool has_jit_ = false;
};

// Rewrites \s and \S of an Oniguruma pattern into explicit Unicode White_Space classes
// (exposed for tests).
std::string rewrite_whitespace_classes(std::string_view pattern);

}  // namespace pagellm
