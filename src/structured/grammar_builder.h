// GrammarBuilder: how compilers write a Grammar. They build expressions (byte classes, literals,
// sequences, alternations, rule references, repetitions) and define named rules with them;
// build() lowers nested groups and repetitions into helper rules, drops alternatives that can
// derive nothing, and rejects left recursion (the pushdown matcher cannot run it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagellm::structured {

class GrammarBuilder {
 public:
  using Expr = int32_t;
  enum class NodeKind : uint8_t { kEmpty, kBytes, kSeq, kAlt, kRef, kRepeat };  // an expression node owned by this builder
  static constexpr int kUnbounded = -1;
  // Bounded repetitions become that many helper rules; past this it is an error, not a stall.
  static constexpr int kMaxRepetitionBound = 20000;

  Expr empty();
  Expr bytes(const ByteSet& set);
  Expr byte(uint8_t b);
  Expr byte_range(uint8_t lo, uint8_t hi);
  Expr literal(std::string_view text);
  Expr seq(std::vector<Expr> items);
  Expr alt(std::vector<Expr> items);
  Expr ref(int32_t rule);
  Expr star(Expr item) { return repeat(item, 0, kUnbounded); }
  Expr plus(Expr item) { return repeat(item, 1, kUnbounded); }
  Expr optional(Expr item) { return repeat(item, 0, 1); }
  Expr repeat(Expr item, int min_count, int max_count);

  // Rules are declared first (so that they can refer to each other) and defined later.
  int32_t declare_rule(std::string name);
  void define_rule(int32_t rule, Expr body);
  // Declares and defines in one go.
  int32_t add_rule(std::string name, Expr body);
  const std::string& rule_name(int32_t rule) const { return rules_[static_cast<size_t>(rule)].name; }
  int32_t num_rules() const { return static_cast<int32_t>(rules_.size()); }

  Expected<Grammar> build(int32_t root_rule);

 private:
  struct Node {
    NodeKind kind = NodeKind::kEmpty;
    int32_t value = 0;  // kBytes: byte-set index, kRef: rule
    int min_count = 0, max_count = 0;
    std::vector<Expr> children;
  };
  struct RuleDef {
    std::string name;
    Expr body = -1;
  };
  using Sequence = std::vector<GrammarElement>;

  Expr add(Node node);
  Expr group(NodeKind kind, std::vector<Expr> items);  // a sequence or an alternation
  int32_t intern_byte_set(const ByteSet& set);
  // Lowering: an expression as alternatives of element sequences, adding helper rules.
  Status lower_alternatives(Expr e, const std::string& owner, std::vector<Sequence>& out);
  Status lower_into(Expr e, const std::string& owner, Sequence& out);
  Expected<int32_t> helper_rule(const std::string& owner, std::vector<Sequence> alternatives);
  Expected<int32_t> lower_repeat(const Node& node, const std::string& owner);

  std::vector<Node> nodes_;
  std::vector<RuleDef> rules_;
  std::vector<ByteSet> byte_sets_;
  std::vector<std::vector<Sequence>> lowered_;  // by rule, filled by build()
  int helper_count_ = 0;
};

}  // namespace pagellm::structured
