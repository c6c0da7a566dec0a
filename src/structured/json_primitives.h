// JsonPrimitives: the grammar pieces every JSON constraint shares, as rules made once per
// builder: string characters (raw UTF-8 but no controls, quote or backslash; all JSON escapes,
// \u escapes only as valid code points or surrogate pairs, so that every string parses),
// strings, numbers, integers (optionally within bounds), and any JSON value. Output is compact:
// these rules allow no whitespace between tokens. Numbers stay within what every JSON parser
// reads exactly: at most 18 integer digits (an int64), 16 fraction digits and a 2-digit exponent.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "structured/grammar_builder.h"

namespace pagellm::structured {

class JsonPrimitives {
 public:
  using Expr = GrammarBuilder::Expr;
  static constexpr int kMaxIntegerDigits = 18;
  static constexpr int kMaxFractionDigits = 16;
  static constexpr int kMaxExponentDigits = 2;
  explicit JsonPrimitives(GrammarBuilder& builder) : b_(builder) {}

  Expr string_char();  // one character of a string's content
  Expr string();
  Expr string_of_length(int min_chars, int max_chars);  // max may be kUnbounded
  Expr number();
  Expr integer();
  // Integers in [min, max] (either side may be open).
  Expr integer_in_range(std::optional<int64_t> min, std::optional<int64_t> max);
  // A string (with quotes) whose value is none of `names`: the keys of additional properties,
  // so that they never repeat a declared property. Written in the one canonical escaping
  // (only quote, backslash and controls escaped, as JSON serializers write them), so that
  // equal values are equal bytes.
  Expr string_not_in(const std::vector<std::string>& names);
  Expr boolean();
  Expr null();
  Expr any_value();
  Expr any_object();
  Expr any_array();

 private:
  Expr cached(int32_t& rule, const char* name, Expr (JsonPrimitives::*make)());
  Expr make_string_char();
  Expr make_string();
  Expr make_number();
  Expr make_integer();
  Expr make_any_value();
  Expr make_any_object();
  Expr make_any_array();
  struct NameTrie {
    bool terminal = false;
    std::map<char32_t, NameTrie> children;
  };
  Expr not_in(const NameTrie& node);
  Expr digits_in_range(const std::string& lo, const std::string& hi);  // same length
  Expr non_negative_in_range(int64_t lo, std::optional<int64_t> hi);

  GrammarBuilder& b_;
  int32_t string_char_ = -1, string_ = -1, number_ = -1, integer_ = -1;
  int32_t any_value_ = -1, any_object_ = -1, any_array_ = -1;
};

}  // namespace pagellm::structured
