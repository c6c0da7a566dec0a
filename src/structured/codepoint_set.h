// CodepointSet: a set of Unicode code points as sorted ranges (regex and EBNF character classes),
// and its lowering to byte-level grammar expressions: UTF-8 sequences split into byte ranges
// (the usual split at the 1/2/3/4-byte boundaries and continuation-byte boundaries; surrogates
// excluded). In JSON-string mode the characters JSON must escape (quote, backslash, controls)
// become their escape sequences, so a pattern matches the decoded string value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "structured/grammar_builder.h"

namespace pagellm::structured {

inline constexpr char32_t kMaxCodepoint = 0x10FFFF;

class CodepointSet {
 public:
  void add(char32_t lo, char32_t hi) { ranges_.emplace_back(lo, hi); }
  void add(char32_t c) { add(c, c); }
  void add_set(const CodepointSet& other) { ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end()); }
  // Sorted, merged ranges.
  const std::vector<std::pair<char32_t, char32_t>>& ranges() const;
  CodepointSet complement() const;

  static CodepointSet digits();      // \d
  static CodepointSet word();        // \w
  static CodepointSet whitespace();  // \s
  static CodepointSet any_but_newline();  // .

 private:
  mutable std::vector<std::pair<char32_t, char32_t>> ranges_;
  mutable bool normalized_ = false;
};

// One code point of the set, as UTF-8 bytes (or JSON-escaped, in JSON-string mode).
GrammarBuilder::Expr codepoints_expr(GrammarBuilder& builder, const CodepointSet& set, bool json_string_mode);
// One literal code point.
GrammarBuilder::Expr codepoint_expr(GrammarBuilder& builder, char32_t c, bool json_string_mode);

std::string utf8_encode(char32_t c);

}  // namespace pagellm::structured
