#include "structured/ebnf_compiler.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "structured/codepoint_set.h"
#include "structured/grammar_builder.h"
#include "tokenizer/utf8.h"

namespace pagellm::structured {

namespace {

using Expr = GrammarBuilder::Expr;

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9') || c == '-'; }

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view text) : text_(text) {}

  Expected<Grammar> parse(std::string_view root_name) {
    if (!utf8::is_valid(text_)) return invalid_argument("[structured] grammar text is not valid UTF-8");
    skip_space();
    while (pos_ < text_.size()) {
      const std::string name = read_name();
      if (name.empty()) return error("expected a rule name");
      skip_space();
      if (text_.substr(pos_, 3) != "::=") return error("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t rule = rule_id(name);
      if (defined_[rule]) return error("rule '" + name + "' is defined twice");
      defined_[rule] = true;
      PAGELLM_ASSIGN_OR_RETURN(Expr body, alternatives());
      b_.define_rule(rule, body);
      skip_space();
    }
    const auto root = rules_.find(std::string(root_name));
    if (root == rules_.end() || !defined_[root->second]) {
      return invalid_argument("[structured] grammar has no '{}' rule", root_name);
    }
    return b_.build(root->second);
  }

 private:
  Status error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return invalid_argument("[structured] grammar line {} column {}: {}", line, col, what);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = pos_;
    if (pos_ < text_.size() && is_name_start(text_[pos_])) {
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  int32_t rule_id(const std::string& name) {
    auto [it, inserted] = rules_.emplace(name, 0);
    if (inserted) {
      it->second = b_.declare_rule(name);
      defined_.push_back(false);
    }
    return it->second;
  }

  // True when a new rule starts here (`name ::=`), which ends the current body.
  bool at_rule_start() {
    const size_t saved = pos_;
    const std::string name = read_name();
    skip_space();
    const bool starts = !name.empty() && text_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return starts;
  }

  Expected<Expr> alternatives() {
    std::vector<Expr> branches;
    for (;;) {
      PAGELLM_ASSIGN_OR_RETURN(Expr branch, sequence());
      branches.push_back(branch);
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '|') break;
      ++pos_;
    }
    return b_.alt(std::move(branches));
  }

  Expected<Expr> sequence() {
    std::vector<Expr> items;
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')' || at_rule_start()) break;
      PAGELLM_ASSIGN_OR_RETURN(Expr item, term());
      PAGELLM_ASSIGN_OR_RETURN(item, postfix(item));
      items.push_back(item);
    }
    return items.empty() ? b_.empty() : b_.seq(std::move(items));
  }

  int number() {
    int value = -1;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = std::min((value < 0 ? 0 : value) * 10 + (text_[pos_] - '0'), 1000000);
      ++pos_;
    }
    return value;
  }

  Expected<Expr> postfix(Expr item) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '?' || c == '*' || c == '+') {
        ++pos_;
        item = b_.repeat(item, c == '+' ? 1 : 0, c == '?' ? 1 : GrammarBuilder::kUnbounded);
        continue;
      }
      if (c != '{') break;
      ++pos_;
      skip_space();
      const int lo = number();
      if (lo < 0) return error("expected a number after '{'");
      int hi = lo;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        hi = number();  // -1: unbounded
      }
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '}') return error("expected '}' to close a repetition");
      ++pos_;
      if (hi >= 0 && hi < lo) return error("repetition {m,n} with n < m");
      item = b_.repeat(item, lo, hi);
    }
    return item;
  }

  Expected<char32_t> escaped_char() {
    if (pos_ >= text_.size()) return error("trailing backslash");
    const char c = text_[pos_++];
    auto hex = [&](int count) -> Expected<char32_t> {
      char32_t v = 0;
      for (int i = 0; i < count; ++i) {
        if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
          return error("bad hex escape");
        }
        const char h = text_[pos_++];
        v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (v > kMaxCodepoint) return error("escape past U+10FFFF");
      return v;
    };
    switch (c) {
      case 'n': return U'\n';
      case 't': return U'\t';
      case 'r': return U'\r';
      case '0': return U'\0';
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return static_cast<char32_t>(c);
      default: --pos_; return error(std::string("unknown escape '\\") + c + "'");
    }
  }

  Expected<char32_t> next_char() {
    if (text_[pos_] == '\\') {
      ++pos_;
      return escaped_char();
    }
    return utf8::decode_at(text_, pos_);
  }

  Expected<Expr> term() {
    const char c = text_[pos_];
    if (c == '"' || c == '\'') {
      ++pos_;
      std::vector<Expr> chars;
      while (pos_ < text_.size() && text_[pos_] != c && text_[pos_] != '\n') {
        PAGELLM_ASSIGN_OR_RETURN(char32_t cp, next_char());
        chars.push_back(b_.literal(utf8_encode(cp)));
      }
      if (pos_ >= text_.size() || text_[pos_] != c) return error("unterminated string");
      ++pos_;
      return chars.empty() ? b_.empty() : b_.seq(std::move(chars));
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return codepoints_expr(b_, CodepointSet().complement(), false);
    }
    if (c == '(') {
      ++pos_;
      PAGELLM_ASSIGN_OR_RETURN(Expr inner, alternatives());
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') return error("expected ')'");
      ++pos_;
      return inner;
    }
    const std::string name = read_name();
    if (name.empty()) return error(std::string("unexpected character '") + c + "'");
    return b_.ref(rule_id(name));
  }

  Expected<Expr> char_class() {
    ++pos_;
    CodepointSet set;
    bool negate = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negate = true;
      ++pos_;
    }
    while (pos_ < text_.size() && text_[pos_] != ']') {
      PAGELLM_ASSIGN_OR_RETURN(char32_t lo, next_char());
      char32_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        PAGELLM_ASSIGN_OR_RETURN(hi, next_char());
        if (hi < lo) return error("reversed range in character class");
      }
      set.add(lo, hi);
    }
    if (pos_ >= text_.size()) return error("unterminated character class");
    ++pos_;
    return codepoints_expr(b_, negate ? set.complement() : set, false);
  }

  std::string_view text_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::map<std::string, int32_t> rules_;
  std::vector<bool> defined_;
};

}  // namespace

Expected<Grammar> grammar_from_ebnf(std::string_view text, std::string_view root_rule) {
  return EbnfParser(text).parse(root_rule);
}

}  // namespace pagellm::structured
