// Grammar: a context-free grammar over bytes, the common target of every constraint compiler
// (JSON Schema, regex, choice, EBNF). Built by GrammarBuilder (grammar_builder.h), immutable after.
//
// Layout, chosen for the matcher's inner loop: every alternative of every rule is a run of
// elements in one flat array, ended by a kEnd element. A "position" is an index into that array,
// so a parse-stack frame is just (position, parent frame). Elements are byte classes (one byte
// from a 256-bit set) or references to rules; repetition and grouping were lowered to helper
// rules by the builder. Every rule can derive some string and no rule is left-recursive (the
// builder checks both), which the pushdown matcher relies on.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::structured {

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct GrammarElement {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = Kind::kEnd;
  int32_t value = 0;  // kBytes: index into byte_sets(); kRule: rule id
};

class Grammar {
 public:
  struct Rule {
    std::string name;
    std::vector<int32_t> alternative_starts;  // positions of each alternative's first element
  };

  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<GrammarElement>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  int32_t root_rule() const { return root_rule_; }
  const GrammarElement& at(int32_t position) const { return elements_[static_cast<size_t>(position)]; }
  const ByteSet& byte_set(int32_t index) const { return byte_sets_[static_cast<size_t>(index)]; }

  // EBNF-like text of the lowered grammar, for errors and debugging.
  std::string to_string() const;
  // True when the whole of `text` is a sentence of the grammar (a reference check for tests).
  bool matches(std::string_view text) const;

 private:
  friend class GrammarBuilder;
  std::vector<Rule> rules_;
  std::vector<GrammarElement> elements_;
  std::vector<ByteSet> byte_sets_;
  int32_t root_rule_ = 0;
};

}  // namespace pagellm::structured
