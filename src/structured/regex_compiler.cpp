#include "structured/regex_compiler.h"

#include <vector>

#include "structured/codepoint_set.h"
#include "tokenizer/utf8.h"

namespace pagellm::structured {

namespace {

using Expr = GrammarBuilder::Expr;

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view pattern, bool json_mode)
      : b_(b), pattern_(pattern), json_mode_(json_mode) {}

  Expected<RegexPiece> parse() {
    if (!utf8::is_valid(pattern_)) return invalid_argument("[structured] regex is not valid UTF-8");
    for (size_t pos = 0; pos < pattern_.size();) cps_.push_back(utf8::decode_at(pattern_, pos));
    RegexPiece piece;
    size_t end = cps_.size();
    if (!cps_.empty() && cps_[0] == '^') {
      piece.anchored_start = true;
      pos_ = 1;
    }
    if (end > pos_ && cps_[end - 1] == '$' && !(end >= 2 && cps_[end - 2] == '\\')) {
      piece.anchored_end = true;
      cps_.pop_back();
    }
    PAGELLM_ASSIGN_OR_RETURN(piece.expr, alternation());
    if (pos_ < cps_.size()) return error("unbalanced ')'");
    return piece;
  }

 private:
  Status error(const std::string& what) const {
    return invalid_argument("[structured] regex '{}': {} at offset {}", pattern_, what, pos_);
  }
  bool at_end() const { return pos_ >= cps_.size(); }
  char32_t peek() const { return cps_[pos_]; }

  Expected<Expr> alternation() {
    std::vector<Expr> branches;
    for (;;) {
      PAGELLM_ASSIGN_OR_RETURN(Expr branch, concatenation());
      branches.push_back(branch);
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    return b_.alt(std::move(branches));
  }

  Expected<Expr> concatenation() {
    std::vector<Expr> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      PAGELLM_ASSIGN_OR_RETURN(Expr item, atom());
      PAGELLM_ASSIGN_OR_RETURN(item, quantified(item));
      items.push_back(item);
    }
    return items.empty() ? b_.empty() : b_.seq(std::move(items));
  }

  // Reads digits at pos_; -1 when there are none.
  int number() {
    int value = -1;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      value = (value < 0 ? 0 : value) * 10 + static_cast<int>(peek() - '0');
      if (value > 1000000) value = 1000000;
      ++pos_;
    }
    return value;
  }

  Expected<Expr> quantified(Expr item) {
    while (!at_end()) {
      const char32_t c = peek();
      int lo = 0, hi = GrammarBuilder::kUnbounded;
      if (c == '?') {
        hi = 1;
        ++pos_;
      } else if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        lo = 1;
        ++pos_;
      } else if (c == '{') {
        const size_t start = pos_++;
        lo = number();
        if (lo < 0) {  // not a quantifier: a literal '{'
          pos_ = start;
          return item;
        }
        if (!at_end() && peek() == ',') {
          ++pos_;
          hi = number();
        } else {
          hi = lo;
        }
        if (at_end() || peek() != '}') {
          pos_ = start;
          return item;
        }
        ++pos_;
        if (hi != GrammarBuilder::kUnbounded && hi < lo) return error("quantifier {m,n} with n < m");
      } else {
        return item;
      }
      if (!at_end() && peek() == '?') ++pos_;  // lazy: same language
      if (!at_end() && peek() == '+') return error("possessive quantifiers are not supported");
      item = b_.repeat(item, lo, hi);
    }
    return item;
  }

  Expected<Expr> atom() {
    const char32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        if (!at_end() && peek() == '?') {
          if (pos_ + 1 < cps_.size() && cps_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return error("group syntax '(?' (lookaround, flags, named groups) is not supported");
          }
        }
        PAGELLM_ASSIGN_OR_RETURN(Expr inner, alternation());
        if (at_end() || peek() != ')') return error("missing ')'");
        ++pos_;
        return inner;
      }
      case '[': {
        PAGELLM_ASSIGN_OR_RETURN(CodepointSet set, char_class());
        return codepoints_expr(b_, set, json_mode_);
      }
      case '.':
        return codepoints_expr(b_, CodepointSet::any_but_newline(), json_mode_);
      case '\\': {
        CodepointSet set;
        PAGELLM_ASSIGN_OR_RETURN(bool is_set, escape(set, /*in_class=*/false));
        if (is_set) return codepoints_expr(b_, set, json_mode_);
        return codepoint_expr(b_, set.ranges()[0].first, json_mode_);
      }
      case '^':
      case '$':
        --pos_;
        return error("anchors are supported only at the start and end of the pattern");
      case '*':
      case '+':
      case '?':
        --pos_;
        return error("quantifier without an operand");
      default:
        return codepoint_expr(b_, c, json_mode_);
    }
  }

  Expected<uint32_t> hex_digits(int count) {
    uint32_t value = 0;
    for (int i = 0; i < count; ++i) {
      if (at_end()) return error("short hex escape");
      const char32_t h = cps_[pos_++];
      int digit = (h >= '0' && h <= '9') ? int(h - '0') : (h >= 'a' && h <= 'f') ? int(h - 'a' + 10)
                                      : (h >= 'A' && h <= 'F') ? int(h - 'A' + 10) : -1;
      if (digit < 0) return error("bad hex digit in escape");
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return value;
  }

  // Reads the escape after '\' into `out`; returns true for a class escape (\d ...), false for one
  // character (then out holds just it).
  Expected<bool> escape(CodepointSet& out, bool in_class) {
    if (at_end()) return error("trailing backslash");
    const char32_t c = cps_[pos_++];
    switch (c) {
      case 'd': out.add_set(CodepointSet::digits()); return true;
      case 'D': out.add_set(CodepointSet::digits().complement()); return true;
      case 'w': out.add_set(CodepointSet::word()); return true;
      case 'W': out.add_set(CodepointSet::word().complement()); return true;
      case 's': out.add_set(CodepointSet::whitespace()); return true;
      case 'S': out.add_set(CodepointSet::whitespace().complement()); return true;
      case 'n': out.add('\n'); return false;
      case 't': out.add('\t'); return false;
      case 'r': out.add('\r'); return false;
      case 'f': out.add('\f'); return false;
      case 'v': out.add('\v'); return false;
      case '0': out.add(U'\0'); return false;
      case 'x': {
        PAGELLM_ASSIGN_OR_RETURN(uint32_t v, hex_digits(2));
        out.add(v);
        return false;
      }
      case 'u': {
        PAGELLM_ASSIGN_OR_RETURN(uint32_t v, hex_digits(4));
        out.add(v);
        return false;
      }
      case 'b':
        if (in_class) {
          out.add('\b');
          return false;
        }
        return error("word boundaries (\\b) are not supported");
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
          --pos_;
          return error(std::string("escape '\\") + static_cast<char>(c) + "' is not supported");
        }
        out.add(c);  // escaped punctuation or a literal character
        return false;
    }
  }

  Expected<CodepointSet> char_class() {
    CodepointSet set;
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    bool first = true;
    while (true) {
      if (at_end()) return error("missing ']'");
      char32_t c = cps_[pos_++];
      if (c == ']' && !first) break;
      first = false;
      char32_t lo = c;
      if (c == '\\') {
        CodepointSet single;
        PAGELLM_ASSIGN_OR_RETURN(bool is_set, escape(single, /*in_class=*/true));
        if (is_set) {
          set.add_set(single);
          continue;
        }
        lo = single.ranges()[0].first;
      }
      char32_t hi = lo;
      if (pos_ + 1 < cps_.size() && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        hi = cps_[pos_++];
        if (hi == '\\') {
          CodepointSet single;
          PAGELLM_ASSIGN_OR_RETURN(bool is_set, escape(single, /*in_class=*/true));
          if (is_set) return error("a class escape cannot end a range");
          hi = single.ranges()[0].first;
        }
        if (hi < lo) return error("reversed range in class");
      }
      set.add(lo, hi);
    }
    return negate ? set.complement() : set;
  }

  GrammarBuilder& b_;
  std::string_view pattern_;
  bool json_mode_;
  std::vector<char32_t> cps_;
  size_t pos_ = 0;
};

}  // namespace

Expected<RegexPiece> regex_expr(GrammarBuilder& builder, std::string_view pattern, bool json_string_mode) {
  return RegexParser(builder, pattern, json_string_mode).parse();
}

Expected<Grammar> grammar_from_regex(std::string_view pattern) {
  GrammarBuilder builder;
  PAGELLM_ASSIGN_OR_RETURN(RegexPiece piece, regex_expr(builder, pattern, /*json_string_mode=*/false));
  return builder.build(builder.add_rule("root", piece.expr));
}

}  // namespace pagellm::structured
