#include "structured/grammar.h"

#include <fmt/format.h>

#include "structured/parse_stacks.h"

namespace pagellm::structured {

namespace {

std::string byte_set_text(const ByteSet& set) {
  std::string out = "[";
  for (int b = 0; b < 256; ++b) {
    if (!set.test(static_cast<uint8_t>(b))) continue;
    int end = b;
    while (end + 1 < 256 && set.test(static_cast<uint8_t>(end + 1))) ++end;
    auto show = [](int v) {
      return (v > 0x20 && v < 0x7F && v != ']' && v != '\\' && v != '-') ? std::string(1, static_cast<char>(v))
                                                                         : fmt::format("\\x{:02X}", v);
    };
    out += show(b);
    if (end > b) out += "-" + show(end);
    b = end;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& rule : rules_) {
    out += rule.name + " ::=";
    for (size_t a = 0; a < rule.alternative_starts.size(); ++a) {
      if (a > 0) out += " |";
      int32_t pos = rule.alternative_starts[a];
      if (at(pos).kind == GrammarElement::Kind::kEnd) out += " \"\"";
      for (; at(pos).kind != GrammarElement::Kind::kEnd; ++pos) {
        const GrammarElement& el = at(pos);
        out += " " + (el.kind == GrammarElement::Kind::kRule ? rules_[static_cast<size_t>(el.value)].name
                                                             : byte_set_text(byte_set(el.value)));
      }
    }
    out += "\n";
  }
  return out;
}

bool Grammar::matches(std::string_view text) const {
  ParseStacks stacks(*this);
  Frontier current, next;
  stacks.start(current);
  for (char c : text) {
    stacks.advance(current.tops, static_cast<uint8_t>(c), next);
    std::swap(current, next);
    if (current.tops.empty() && !current.complete) return false;
  }
  return current.complete;
}

}  // namespace pagellm::structured
