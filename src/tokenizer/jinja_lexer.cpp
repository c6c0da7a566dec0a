#include "tokenizer/jinja_lexer.h"

#include <cstdlib>
#include <string_view>

#include "tokenizer/jinja_string.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

std::string normalize_template_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void position_to_line_col(const std::string& source, uint32_t pos, int* line, int* col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(source[i]);
    if (c == '\n') {
      ++*line;
      *col = 1;
    } else if ((c & 0xC0) != 0x80) {
      ++*col;
    }
  }
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        break;
      }
      char kind = src_[tag + 1];
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      size_t raw_body = kind == '%' ? match_raw_begin(tag + 2) : std::string::npos;
      std::string text = src_.substr(pos_, tag - pos_);
      text = strip_before_tag(std::move(text), sign, kind != '{', line_starting);
      emit_data(pos_, std::move(text));
      if (raw_body != std::string::npos) {
        if (raw_body >= src_.size()) break;  // jinja2 stops silently when nothing follows
        line_starting = lex_raw(raw_body);
      } else if (kind == '#') {
        if (tag + 2 + (sign ? 1 : 0) >= src_.size()) break;  // "{#" at the very end: jinja2 ignores it
        line_starting = skip_comment(tag, tag + 2 + (sign ? 1 : 0));
      } else {
        pos_ = tag + 2 + (sign ? 1 : 0);
        tokens_.push_back(Token{kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin,
                                static_cast<uint32_t>(tag), "", 0, 0.0});
        line_starting = lex_tag(kind == '{', tag);
      }
    }
    tokens_.push_back(Token{TokenType::kEof, static_cast<uint32_t>(src_.size()), "", 0, 0.0});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& message) {
    int line, col;
    position_to_line_col(src_, static_cast<uint32_t>(at), &line, &col);
    throw TemplateError(message, line, col);
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  size_t skip_ws(size_t at) const { return at + py_space_prefix_bytes(std::string_view(src_).substr(at)); }

  // jinja2's OptionalLStrip: "-" strips all whitespace before the tag; otherwise, for block and
  // comment tags, lstrip_blocks removes spaces between the line start and the tag.
  std::string strip_before_tag(std::string text, char sign, bool lstrip_applies, bool line_starting) const {
    if (sign == '-') {
      text.resize(text.size() - py_space_suffix_bytes(text));
    } else if (sign != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          py_space_prefix_bytes(std::string_view(text).substr(l_pos)) == text.size() - l_pos) {
        text.resize(l_pos);
      }
    }
    return text;
  }

  void emit_data(size_t at, std::string text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::kData, static_cast<uint32_t>(at), std::move(text), 0, 0.0});
  }

  // Matches the end of a block/comment tag at `at` ("+%}", "-%}" + whitespace, "%}" + one newline);
  // returns the position after it or npos.
  size_t match_tag_end(size_t at, char closer) const {
    auto is = [&](size_t p, char a, char b) { return p + 1 < src_.size() && src_[p] == a && src_[p + 1] == b; };
    if (at < src_.size() && src_[at] == '+' && is(at + 1, closer, '}')) return at + 3;
    if (at < src_.size() && src_[at] == '-' && is(at + 1, closer, '}')) return skip_ws(at + 3);
    if (is(at, closer, '}')) return (at + 2 < src_.size() && src_[at + 2] == '\n') ? at + 3 : at + 2;
    return std::string::npos;
  }

  // `{% raw %}`: returns the position after the opening tag, or npos when this is another tag.
  size_t match_raw_begin(size_t at) const {
    if (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) ++at;
    at = skip_ws(at);
    if (src_.compare(at, 3, "raw") != 0 || (at + 3 < src_.size() && is_name_char(src_[at + 3]))) return std::string::npos;
    at = skip_ws(at + 3);
    if (src_.compare(at, 3, "-%}") == 0) return skip_ws(at + 3);
    if (src_.compare(at, 2, "%}") == 0) return at + 2;  // no trim_blocks after raw begin, as in jinja2
    return std::string::npos;
  }

  bool lex_raw(size_t body) {
    for (size_t tag = src_.find("{%", body); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      size_t at = tag + 2;
      char sign = (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) ? src_[at] : '\0';
      if (sign) ++at;
      at = skip_ws(at);
      if (src_.compare(at, 6, "endraw") != 0) continue;
      at = skip_ws(at + 6);
      size_t end = match_tag_end(at, '%');
      if (end == std::string::npos) continue;
      std::string text = strip_before_tag(src_.substr(body, tag - body), sign, true, false);
      emit_data(body, std::move(text));
      pos_ = end;
      return src_[end - 1] == '\n';
    }
    fail(body, "Missing end of raw directive");
  }

  bool skip_comment(size_t tag, size_t at) {
    for (size_t p = at; p < src_.size(); ++p) {
      size_t end = std::string::npos;
      if (src_[p] == '+' || src_[p] == '-') {
        if (src_.compare(p + 1, 2, "#}") == 0) end = match_tag_end(p, '#');
      } else if (src_.compare(p, 2, "#}") == 0) {
        end = match_tag_end(p, '#');
      }
      if (end != std::string::npos) {
        pos_ = end;
        return src_[end - 1] == '\n';
      }
    }
    fail(tag, "Missing end of comment tag");
  }

  // Lexes the inside of {{ }} or {% %}; returns whether the end token ended with a newline.
  bool lex_tag(bool is_variable, size_t tag_start) {
    std::vector<char> balancing;  // expected closing brackets
    while (true) {
      if (pos_ >= src_.size()) fail(tag_start, is_variable ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (balancing.empty()) {
        size_t end = std::string::npos;
        if (is_variable) {
          if (src_.compare(pos_, 3, "-}}") == 0) end = skip_ws(pos_ + 3);
          else if (src_.compare(pos_, 2, "}}") == 0) end = pos_ + 2;
        } else {
          end = match_tag_end(pos_, '%');
        }
        if (end != std::string::npos) {
          tokens_.push_back(Token{is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd,
                                  static_cast<uint32_t>(pos_), "", 0, 0.0});
          pos_ = end;
          return src_[end - 1] == '\n';
        }
      }
      size_t ws_end = skip_ws(pos_);
      if (ws_end != pos_) {
        pos_ = ws_end;
        continue;
      }
      char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t end = pos_;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        tokens_.push_back(Token{TokenType::kName, static_cast<uint32_t>(pos_), src_.substr(pos_, end - pos_), 0, 0.0});
        pos_ = end;
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(balancing);
      }
    }
  }

  void lex_operator(std::vector<char>& balancing) {
    static const char* kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
    std::string op;
    for (const char* two : kTwoChar)
      if (src_.compare(pos_, 2, two) == 0) op = two;
    char c = src_[pos_];
    if (op.empty()) {
      if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
        fail(pos_, std::string("unexpected char '") + (static_cast<unsigned char>(c) < 0x80 ? std::string(1, c) : "non-ASCII") + "'");
      }
      op = std::string(1, c);
    }
    if (c == '(' || c == '[' || c == '{') {
      if (balancing.size() > 1000) fail(pos_, "brackets nested too deeply");
      balancing.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balancing.empty()) fail(pos_, std::string("unexpected '") + c + "'");
      if (balancing.back() != c) fail(pos_, std::string("unexpected '") + c + "', expected '" + balancing.back() + "'");
      balancing.pop_back();
    }
    tokens_.push_back(Token{TokenType::kOperator, static_cast<uint32_t>(pos_), op, 0, 0.0});
    pos_ += op.size();
  }

  // Digits with optional "_" separators between digits.
  size_t digits_end(size_t at, bool (*ok)(char)) const {
    size_t p = at;
    if (p >= src_.size() || !ok(src_[p])) return at;
    while (p < src_.size()) {
      if (ok(src_[p])) ++p;
      else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) p += 2;
      else break;
    }
    return p;
  }

  void lex_number() {
    size_t start = pos_;
    auto strip_underscores = [](std::string s) {
      std::string out;
      for (char ch : s) if (ch != '_') out += ch;
      return out;
    };
    bool after_dot = start > 0 && src_[start - 1] == '.';  // jinja2's float rule has (?<!\.)
    size_t int_end = digits_end(start, is_digit);
    size_t p = int_end;
    bool is_float = false;
    if (!after_dot) {
      if (p < src_.size() && src_[p] == '.' && p + 1 < src_.size() && is_digit(src_[p + 1])) {
        p = digits_end(p + 1, is_digit);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        size_t e_end = digits_end(q, is_digit);
        if (e_end != q) {
          p = e_end;
          is_float = true;
        }
      }
    }
    if (is_float) {
      std::string text = strip_underscores(src_.substr(start, p - start));
      tokens_.push_back(Token{TokenType::kFloat, static_cast<uint32_t>(start), text, 0, std::strtod(text.c_str(), nullptr)});
      pos_ = p;
      return;
    }
    int base = 10;
    size_t body = start;
    if (src_[start] == '0' && start + 1 < src_.size()) {
      char b = static_cast<char>(src_[start + 1] | 0x20);
      base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
    }
    if (base != 10) {
      auto ok = base == 16 ? +[](char ch) { return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f'); }
                : base == 8 ? +[](char ch) { return ch >= '0' && ch <= '7'; }
                            : +[](char ch) { return ch == '0' || ch == '1'; };
      body = start + 2;
      if (body < src_.size() && src_[body] == '_') ++body;
      p = digits_end(body, ok);
      if (p == body) {  // "0x" without digits: just the integer 0
        base = 10;
        body = start;
        p = start + 1;
      }
    } else if (src_[start] == '0') {
      p = start + 1;  // jinja2: 0(_?0)*; "01" lexes as 0 then 1
      while (p + 1 < src_.size() && (src_[p] == '0' || (src_[p] == '_' && src_[p + 1] == '0'))) p += src_[p] == '_' ? 2 : 1;
    } else {
      p = int_end;
    }
    std::string digits = strip_underscores(src_.substr(body, p - body));
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(digits.c_str(), &end, base);
    if (errno == ERANGE) fail(start, "integer literal too large");
    tokens_.push_back(Token{TokenType::kInteger, static_cast<uint32_t>(start), src_.substr(start, p - start), v, 0.0});
    pos_ = p;
  }

  void lex_string() {
    size_t start = pos_;
    char quote = src_[pos_];
    std::string out;
    size_t p = pos_ + 1;
    auto hex_value = [&](size_t at, int n) -> long {
      if (at + static_cast<size_t>(n) > src_.size()) fail(at, "truncated escape in string literal");
      long v = 0;
      for (int i = 0; i < n; ++i) {
        char h = static_cast<char>(src_[at + static_cast<size_t>(i)] | 0x20);
        if (!(is_digit(h) || (h >= 'a' && h <= 'f'))) fail(at, "truncated escape in string literal");
        v = v * 16 + (is_digit(h) ? h - '0' : h - 'a' + 10);
      }
      return v;
    };
    while (true) {
      if (p >= src_.size()) fail(start, "unexpected end of string literal");
      char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) fail(start, "unexpected end of string literal");
      char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;  // line continuation
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': utf8_append(out, static_cast<char32_t>(hex_value(p, 2))); p += 2; break;
        case 'u': utf8_append(out, static_cast<char32_t>(hex_value(p, 4))); p += 4; break;
        case 'U': {
          long v = hex_value(p, 8);
          if (v > 0x10FFFF) fail(p, "illegal Unicode character in string literal");
          utf8_append(out, static_cast<char32_t>(v));
          p += 8;
          break;
        }
        case 'N': fail(p - 2, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) v = v * 8 + (src_[p++] - '0');
            utf8_append(out, static_cast<char32_t>(v));
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // jinja2 escapes non-ASCII as \xNN/\uNNNN before decoding, so "\é" decodes to "\xe9".
            size_t len = 1;
            while (p - 1 + len < src_.size() && (static_cast<unsigned char>(src_[p - 1 + len]) & 0xC0) == 0x80) ++len;
            char32_t cp = utf8_decode(std::string_view(src_).substr(p - 1, len))[0];
            char buf[16];
            if (cp <= 0xFF) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
            else if (cp <= 0xFFFF) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
            else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
            out += buf;
            p += len - 1;
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    if (!is_valid_utf8(out)) fail(start, "string literal escapes produce invalid UTF-8 (surrogates)");
    tokens_.push_back(Token{TokenType::kString, static_cast<uint32_t>(start), std::move(out), 0, 0.0});
    pos_ = p + 1;
  }

  const std::string& src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize_template(const std::string& normalized_source) {
  return Lexer(normalized_source).run();
}

}  // namespace pagellm::jinja
