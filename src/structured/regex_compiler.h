// Regex -> grammar. A practical subset of the regexes that JSON Schema "pattern" and vLLM's
// guided_regex use: literals (UTF-8), escapes (\d \w \s and their negations, \n \t \r \f \v \0,
// \xHH, \uHHHH, escaped punctuation), classes [...] with ranges and negation, '.', groups
// (...) and (?:...), alternation, the quantifiers ? * + {m} {m,} {m,n} (a lazy '?' suffix is
// accepted: it changes nothing about the language). Anchors: '^' first and '$' last only.
// Backreferences, lookaround, word boundaries, \p{...} and flags are errors naming the feature.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "structured/grammar.h"
#include "structured/grammar_builder.h"

namespace pagellm::structured {

struct RegexPiece {
  GrammarBuilder::Expr expr = -1;
  bool anchored_start = false;  // the pattern began with '^'
  bool anchored_end = false;    // the pattern ended with '$'
};

// The pattern as an expression in `builder`. In JSON-string mode it matches the JSON-escaped
// form of strings the regex matches (for a schema's "pattern" inside quotes).
Expected<RegexPiece> regex_expr(GrammarBuilder& builder, std::string_view pattern, bool json_string_mode);

// A grammar whose sentences are exactly the strings the whole pattern matches (anchors implied).
Expected<Grammar> grammar_from_regex(std::string_view pattern);

}  // namespace pagellm::structured
