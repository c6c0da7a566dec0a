#include "structured/codepoint_set.h"

#include <algorithm>

#include <fmt/format.h>

namespace pagellm::structured {

const std::vector<std::pair<char32_t, char32_t>>& CodepointSet::ranges() const {
  if (normalized_) return ranges_;
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
  normalized_ = true;
  return ranges_;
}

CodepointSet CodepointSet::complement() const {
  CodepointSet out;
  char32_t next = 0;
  for (const auto& [lo, hi] : ranges()) {
    if (lo > next) out.add(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.add(next, kMaxCodepoint);
  return out;
}

CodepointSet CodepointSet::digits() {
  CodepointSet s;
  s.add('0', '9');
  return s;
}

CodepointSet CodepointSet::word() {
  CodepointSet s;
  s.add('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_');
  return s;
}

CodepointSet CodepointSet::whitespace() {
  CodepointSet s;
  s.add(' ');
  s.add('\t', '\r');  // \t \n \v \f \r
  return s;
}

CodepointSet CodepointSet::any_but_newline() {
  CodepointSet s;
  s.add('\n');
  return s.complement();
}

std::string utf8_encode(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

namespace {

// Splits [lo, hi] (same UTF-8 length, no surrogates) into ranges whose encodings are products of
// byte ranges, and adds one sequence expression per piece.
void add_utf8_pieces(GrammarBuilder& b, char32_t lo, char32_t hi, std::vector<GrammarBuilder::Expr>& out) {
  static constexpr char32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (char32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      add_utf8_pieces(b, lo, end, out);
      add_utf8_pieces(b, end + 1, hi, out);
      return;
    }
  }
  const std::string lo_bytes = utf8_encode(lo), hi_bytes = utf8_encode(hi);
  for (size_t i = 1; i < lo_bytes.size(); ++i) {
    const char32_t mask = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~mask) == (hi & ~mask)) continue;
    if ((lo & mask) != 0) {
      add_utf8_pieces(b, lo, lo | mask, out);
      add_utf8_pieces(b, (lo | mask) + 1, hi, out);
      return;
    }
    if ((hi & mask) != mask) {
      add_utf8_pieces(b, lo, (hi & ~mask) - 1, out);
      add_utf8_pieces(b, hi & ~mask, hi, out);
      return;
    }
  }
  std::vector<GrammarBuilder::Expr> bytes;
  for (size_t i = 0; i < lo_bytes.size(); ++i) {
    bytes.push_back(b.byte_range(static_cast<uint8_t>(lo_bytes[i]), static_cast<uint8_t>(hi_bytes[i])));
  }
  out.push_back(b.seq(std::move(bytes)));
}

// JSON's escape for a character it does not allow raw inside strings.
std::string json_escape(char32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: return fmt::format("\\u{:04x}", static_cast<unsigned>(c));
  }
}

bool json_must_escape(char32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

}  // namespace

GrammarBuilder::Expr codepoints_expr(GrammarBuilder& b, const CodepointSet& set, bool json_string_mode) {
  std::vector<GrammarBuilder::Expr> alternatives;
  ByteSet ascii;
  for (auto [lo, hi] : set.ranges()) {
    for (; lo <= hi && lo < 0x80; ++lo) {
      if (json_string_mode && json_must_escape(lo)) {
        alternatives.push_back(b.literal(json_escape(lo)));
      } else {
        ascii.set(static_cast<uint8_t>(lo));
      }
    }
    if (lo > hi) continue;
    if (lo < 0xD800 && hi > 0xDFFF) {  // surrogates are not characters
      add_utf8_pieces(b, lo, 0xD7FF, alternatives);
      add_utf8_pieces(b, 0xE000, hi, alternatives);
    } else if (!(lo >= 0xD800 && hi <= 0xDFFF)) {
      add_utf8_pieces(b, lo >= 0xD800 && lo <= 0xDFFF ? 0xE000 : lo, hi >= 0xD800 && hi <= 0xDFFF ? 0xD7FF : hi,
                      alternatives);
    }
  }
  if (!ascii.empty()) alternatives.insert(alternatives.begin(), b.bytes(ascii));
  if (alternatives.empty()) return b.bytes(ByteSet{});  // matches nothing
  return b.alt(std::move(alternatives));
}

GrammarBuilder::Expr codepoint_expr(GrammarBuilder& b, char32_t c, bool json_string_mode) {
  if (json_string_mode && json_must_escape(c)) return b.literal(json_escape(c));
  return b.literal(utf8_encode(c));
}

}  // namespace pagellm::structured
