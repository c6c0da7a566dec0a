#include "structured/json_primitives.h"

#include <string>
#include <vector>

#include "structured/codepoint_set.h"
#include "tokenizer/utf8.h"

namespace pagellm::structured {

using Expr = JsonPrimitives::Expr;

Expr JsonPrimitives::cached(int32_t& rule, const char* name, Expr (JsonPrimitives::*make)()) {
  if (rule < 0) {
    rule = b_.declare_rule(name);  // declared first: any_value refers to itself
    b_.define_rule(rule, (this->*make)());
  }
  return b_.ref(rule);
}

Expr JsonPrimitives::string_char() { return cached(string_char_, "json_char", &JsonPrimitives::make_string_char); }
Expr JsonPrimitives::string() { return cached(string_, "json_string", &JsonPrimitives::make_string); }
Expr JsonPrimitives::number() { return cached(number_, "json_number", &JsonPrimitives::make_number); }
Expr JsonPrimitives::integer() { return cached(integer_, "json_integer", &JsonPrimitives::make_integer); }
Expr JsonPrimitives::any_value() { return cached(any_value_, "json_value", &JsonPrimitives::make_any_value); }
Expr JsonPrimitives::any_object() { return cached(any_object_, "json_object", &JsonPrimitives::make_any_object); }
Expr JsonPrimitives::any_array() { return cached(any_array_, "json_array", &JsonPrimitives::make_any_array); }
Expr JsonPrimitives::boolean() { return b_.alt({b_.literal("true"), b_.literal("false")}); }
Expr JsonPrimitives::null() { return b_.literal("null"); }

Expr JsonPrimitives::make_string_char() {
  ByteSet plain;  // printable ASCII but quote and backslash
  plain.set_range(0x20, 0x7F);
  plain.bits[0] &= ~(uint64_t{1} << '"');
  plain.bits[1] &= ~(uint64_t{1} << ('\\' - 64));
  auto hex = [&] {
    ByteSet s;
    s.set_range('0', '9');
    s.set_range('a', 'f');
    s.set_range('A', 'F');
    return b_.bytes(s);
  };
  auto range = [&](uint8_t lo, uint8_t hi) { return b_.byte_range(lo, hi); };
  ByteSet not_d;  // first hex digit of a non-surrogate \u escape
  not_d.set_range('0', '9');
  not_d.set_range('a', 'c');
  not_d.set_range('A', 'C');
  not_d.set('e');
  not_d.set('f');
  not_d.set('E');
  not_d.set('F');
  ByteSet d, low8_b, high_c_f;
  d.set('d');
  d.set('D');
  low8_b.set_range('8', '9');
  low8_b.set_range('a', 'b');
  low8_b.set_range('A', 'B');
  high_c_f.set_range('c', 'f');
  high_c_f.set_range('C', 'F');
  const Expr unicode = b_.alt({
      b_.seq({b_.bytes(not_d), hex(), hex(), hex()}),
      b_.seq({b_.bytes(d), range('0', '7'), hex(), hex()}),
      b_.seq({b_.bytes(d), b_.bytes(low8_b), hex(), hex(), b_.literal("\\u"), b_.bytes(d), b_.bytes(high_c_f),
              hex(), hex()}),
  });
  ByteSet simple_escape;
  for (char c : std::string("\"\\/bfnrt")) simple_escape.set(static_cast<uint8_t>(c));
  const Expr cont = range(0x80, 0xBF);
  return b_.alt({
      b_.bytes(plain),
      b_.seq({b_.byte('\\'), b_.alt({b_.bytes(simple_escape), b_.seq({b_.byte('u'), unicode})})}),
      b_.seq({range(0xC2, 0xDF), cont}),
      b_.seq({b_.byte(0xE0), range(0xA0, 0xBF), cont}),
      b_.seq({range(0xE1, 0xEC), cont, cont}),
      b_.seq({b_.byte(0xED), range(0x80, 0x9F), cont}),
      b_.seq({range(0xEE, 0xEF), cont, cont}),
      b_.seq({b_.byte(0xF0), range(0x90, 0xBF), cont, cont}),
      b_.seq({range(0xF1, 0xF3), cont, cont, cont}),
      b_.seq({b_.byte(0xF4), range(0x80, 0x8F), cont, cont}),
  });
}

Expr JsonPrimitives::make_string() { return b_.seq({b_.byte('"'), b_.star(string_char()), b_.byte('"')}); }

Expr JsonPrimitives::string_of_length(int min_chars, int max_chars) {
  return b_.seq({b_.byte('"'), b_.repeat(string_char(), min_chars, max_chars), b_.byte('"')});
}

Expr JsonPrimitives::make_integer() {
  return b_.seq({b_.optional(b_.byte('-')),
                 b_.alt({b_.byte('0'), b_.seq({b_.byte_range('1', '9'),
                                               b_.repeat(b_.byte_range('0', '9'), 0, kMaxIntegerDigits - 1)})})});
}

Expr JsonPrimitives::make_number() {
  ByteSet e, sign;
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  const Expr digit = b_.byte_range('0', '9');
  return b_.seq({integer(), b_.optional(b_.seq({b_.byte('.'), b_.repeat(digit, 1, kMaxFractionDigits)})),
                 b_.optional(b_.seq({b_.bytes(e), b_.optional(b_.bytes(sign)), b_.repeat(digit, 1, kMaxExponentDigits)}))});
}

Expr JsonPrimitives::make_any_value() {
  return b_.alt({any_object(), any_array(), string(), number(), b_.literal("true"), b_.literal("false"),
                 b_.literal("null")});
}

Expr JsonPrimitives::make_any_object() {
  const Expr member = b_.seq({string(), b_.byte(':'), any_value()});
  const Expr member2 = b_.seq({string(), b_.byte(':'), any_value()});
  return b_.seq({b_.byte('{'), b_.optional(b_.seq({member, b_.star(b_.seq({b_.byte(','), member2}))})),
                 b_.byte('}')});
}

Expr JsonPrimitives::make_any_array() {
  return b_.seq({b_.byte('['),
                 b_.optional(b_.seq({any_value(), b_.star(b_.seq({b_.byte(','), any_value()}))})),
                 b_.byte(']')});
}

Expr JsonPrimitives::string_not_in(const std::vector<std::string>& names) {
  NameTrie root;
  for (const std::string& name : names) {
    NameTrie* node = &root;
    for (size_t pos = 0; pos < name.size();) node = &node->children[utf8::decode_at(name, pos)];
    node->terminal = true;
  }
  return b_.seq({b_.byte('"'), not_in(root), b_.byte('"')});
}

// Strings that, from this trie node on, do not finish at a name: stop where no name stops,
// follow a name's next character, or leave every name with another character and go free.
Expr JsonPrimitives::not_in(const NameTrie& node) {
  std::vector<Expr> alternatives;
  if (!node.terminal) alternatives.push_back(b_.empty());
  CodepointSet next_chars;
  for (const auto& [c, child] : node.children) {
    next_chars.add(c);
    alternatives.push_back(b_.seq({codepoint_expr(b_, c, true), not_in(child)}));
  }
  const Expr any_char = codepoints_expr(b_, CodepointSet().complement(), true);
  alternatives.push_back(b_.seq({codepoints_expr(b_, next_chars.complement(), true), b_.star(any_char)}));
  return b_.alt(std::move(alternatives));
}

// Fixed-length digit strings between lo and hi (same length, lo <= hi).
Expr JsonPrimitives::digits_in_range(const std::string& lo, const std::string& hi) {
  const auto first_lo = static_cast<uint8_t>(lo[0]), first_hi = static_cast<uint8_t>(hi[0]);
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos) {
    const int n = static_cast<int>(lo.size());  // every string of n digits; keeps the recursion linear
    return b_.repeat(b_.byte_range('0', '9'), n, n);
  }
  if (lo.size() == 1) return b_.byte_range(first_lo, first_hi);
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  if (first_lo == first_hi) return b_.seq({b_.byte(first_lo), digits_in_range(rest_lo, rest_hi)});
  std::vector<Expr> parts;
  parts.push_back(b_.seq({b_.byte(first_lo), digits_in_range(rest_lo, std::string(rest_lo.size(), '9'))}));
  if (first_lo + 1 <= first_hi - 1) {
    parts.push_back(b_.seq({b_.byte_range(static_cast<uint8_t>(first_lo + 1), static_cast<uint8_t>(first_hi - 1)),
                            b_.repeat(b_.byte_range('0', '9'), static_cast<int>(rest_lo.size()),
                                      static_cast<int>(rest_lo.size()))}));
  }
  parts.push_back(b_.seq({b_.byte(first_hi), digits_in_range(std::string(rest_hi.size(), '0'), rest_hi)}));
  return b_.alt(std::move(parts));
}

// Non-negative integers in [lo, hi] without leading zeros (hi open when absent).
Expr JsonPrimitives::non_negative_in_range(int64_t lo, std::optional<int64_t> hi) {
  std::vector<Expr> parts;
  const size_t lo_len = std::to_string(lo).size();
  const size_t hi_len = hi ? std::to_string(*hi).size() : lo_len;
  int64_t length_start = 1;  // 10^(L-1)
  for (size_t len = 1; len <= hi_len; ++len, length_start *= 10) {
    if (len < lo_len) continue;
    const int64_t length_end = length_start * 10 - 1;  // fits: at most 19 digits are handled below
    const int64_t from = std::max(lo, len == 1 ? 0 : length_start);
    const int64_t to = hi ? std::min(*hi, length_end) : length_end;
    if (from <= to) parts.push_back(digits_in_range(std::to_string(from), std::to_string(to)));
    if (len == 18) break;
  }
  if (!hi) {  // longer than lo: any digits
    parts.push_back(b_.seq({b_.byte_range('1', '9'),
                            b_.repeat(b_.byte_range('0', '9'), static_cast<int>(lo_len), GrammarBuilder::kUnbounded)}));
  }
  return parts.empty() ? b_.bytes(ByteSet{}) : b_.alt(std::move(parts));
}

Expr JsonPrimitives::integer_in_range(std::optional<int64_t> min, std::optional<int64_t> max) {
  if (!min && !max) return integer();
  static constexpr int64_t kLargest = 999999999999999999;  // kMaxIntegerDigits nines
  min = std::max(min.value_or(-kLargest), -kLargest);
  max = std::min(max.value_or(kLargest), kLargest);
  std::vector<Expr> parts;
  if (!max || *max >= 0) parts.push_back(non_negative_in_range(min ? std::max<int64_t>(*min, 0) : 0, max));
  if (!min || *min < 0) {  // negatives: '-' then magnitudes in [max(1, -max), -min]
    const int64_t magnitude_lo = max ? std::max<int64_t>(1, -*max) : 1;
    std::optional<int64_t> magnitude_hi;
    if (min) magnitude_hi = -*min;
    if (!magnitude_hi || magnitude_lo <= *magnitude_hi) {
      parts.push_back(b_.seq({b_.byte('-'), non_negative_in_range(magnitude_lo, magnitude_hi)}));
    }
  }
  return parts.empty() ? b_.bytes(ByteSet{}) : b_.alt(std::move(parts));
}

}  // namespace pagellm::structured
