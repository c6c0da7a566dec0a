#include "structured/grammar_builder.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace pagellm::structured {

using ElementKind = GrammarElement::Kind;
using NodeKind = GrammarBuilder::NodeKind;

GrammarBuilder::Expr GrammarBuilder::add(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<Expr>(nodes_.size() - 1);
}

int32_t GrammarBuilder::intern_byte_set(const ByteSet& set) {
  for (size_t i = 0; i < byte_sets_.size(); ++i) {
    if (byte_sets_[i] == set) return static_cast<int32_t>(i);
  }
  byte_sets_.push_back(set);
  return static_cast<int32_t>(byte_sets_.size() - 1);
}

GrammarBuilder::Expr GrammarBuilder::empty() { return add(Node{}); }

GrammarBuilder::Expr GrammarBuilder::bytes(const ByteSet& set) {
  Node n;
  n.kind = NodeKind::kBytes;
  n.value = intern_byte_set(set);
  return add(std::move(n));
}

GrammarBuilder::Expr GrammarBuilder::byte(uint8_t b) { return byte_range(b, b); }

GrammarBuilder::Expr GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set;
  set.set_range(lo, hi);
  return bytes(set);
}

GrammarBuilder::Expr GrammarBuilder::literal(std::string_view text) {
  std::vector<Expr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(items));
}

GrammarBuilder::Expr GrammarBuilder::group(NodeKind kind, std::vector<Expr> items) {
  if (items.size() == 1) return items[0];
  Node n;
  n.kind = kind;
  n.children = std::move(items);
  return add(std::move(n));
}

GrammarBuilder::Expr GrammarBuilder::seq(std::vector<Expr> items) { return group(NodeKind::kSeq, std::move(items)); }
GrammarBuilder::Expr GrammarBuilder::alt(std::vector<Expr> items) { return group(NodeKind::kAlt, std::move(items)); }

GrammarBuilder::Expr GrammarBuilder::ref(int32_t rule) {
  Node n;
  n.kind = NodeKind::kRef;
  n.value = rule;
  return add(std::move(n));
}

GrammarBuilder::Expr GrammarBuilder::repeat(Expr item, int min_count, int max_count) {
  Node n;
  n.kind = NodeKind::kRepeat;
  n.min_count = min_count;
  n.max_count = max_count;
  n.children = {item};
  return add(std::move(n));
}

int32_t GrammarBuilder::declare_rule(std::string name) {
  rules_.push_back(RuleDef{std::move(name), -1});
  return static_cast<int32_t>(rules_.size() - 1);
}

void GrammarBuilder::define_rule(int32_t rule, Expr body) { rules_[static_cast<size_t>(rule)].body = body; }

int32_t GrammarBuilder::add_rule(std::string name, Expr body) {
  const int32_t rule = declare_rule(std::move(name));
  define_rule(rule, body);
  return rule;
}

Expected<int32_t> GrammarBuilder::helper_rule(const std::string& owner, std::vector<Sequence> alternatives) {
  rules_.push_back(RuleDef{owner + "_" + std::to_string(++helper_count_), -1});
  lowered_.push_back(std::move(alternatives));
  return static_cast<int32_t>(rules_.size() - 1);
}

Status GrammarBuilder::lower_alternatives(Expr e, const std::string& owner, std::vector<Sequence>& out) {
  const Node& node = nodes_[static_cast<size_t>(e)];
  if (node.kind == NodeKind::kAlt) {
    const std::vector<Expr> children = node.children;  // nodes_ may not grow here, but be safe
    for (Expr child : children) PAGELLM_RETURN_IF_ERROR(lower_alternatives(child, owner, out));
    return Status::ok();
  }
  Sequence seq;
  PAGELLM_RETURN_IF_ERROR(lower_into(e, owner, seq));
  out.push_back(std::move(seq));
  return Status::ok();
}

Status GrammarBuilder::lower_into(Expr e, const std::string& owner, Sequence& out) {
  const Node node = nodes_[static_cast<size_t>(e)];  // a copy: lowering adds rules, not nodes
  switch (node.kind) {
    case NodeKind::kEmpty:
      return Status::ok();
    case NodeKind::kBytes:
      out.push_back({ElementKind::kBytes, node.value});
      return Status::ok();
    case NodeKind::kRef:
      out.push_back({ElementKind::kRule, node.value});
      return Status::ok();
    case NodeKind::kSeq:
      for (Expr child : node.children) PAGELLM_RETURN_IF_ERROR(lower_into(child, owner, out));
      return Status::ok();
    case NodeKind::kAlt: {
      std::vector<Sequence> alternatives;
      PAGELLM_RETURN_IF_ERROR(lower_alternatives(e, owner, alternatives));
      PAGELLM_ASSIGN_OR_RETURN(int32_t rule, helper_rule(owner, std::move(alternatives)));
      out.push_back({ElementKind::kRule, rule});
      return Status::ok();
    }
    case NodeKind::kRepeat:
      break;
  }
  // A repetition: the item `min` times inline, then a helper rule for the optional rest.
  if (node.max_count != kUnbounded && (node.max_count < node.min_count || node.min_count < 0)) {
    return invalid_argument("[structured] repetition {{{},{}}} has its bounds reversed", node.min_count,
                            node.max_count);
  }
  if (node.min_count > kMaxRepetitionBound || node.max_count > kMaxRepetitionBound) {
    return invalid_argument("[structured] repetition bound {} is larger than the supported {}",
                            std::max(node.min_count, node.max_count), kMaxRepetitionBound);
  }
  Sequence item;
  PAGELLM_RETURN_IF_ERROR(lower_into(node.children[0], owner, item));
  if (item.size() != 1) {  // repeat one element: a helper rule stands for a longer item
    PAGELLM_ASSIGN_OR_RETURN(int32_t rule, helper_rule(owner, {item}));
    item = {{ElementKind::kRule, rule}};
  }
  for (int i = 0; i < node.min_count; ++i) out.push_back(item[0]);
  if (node.max_count == kUnbounded) {  // S ::= item S | ε  (right recursion: the matcher's tail call)
    PAGELLM_ASSIGN_OR_RETURN(int32_t star, helper_rule(owner, {}));
    lowered_[static_cast<size_t>(star)] = {{item[0], {ElementKind::kRule, star}}, {}};
    out.push_back({ElementKind::kRule, star});
    return Status::ok();
  }
  int32_t tail = -1;  // R_k ::= item R_{k-1} | ε, R_1 ::= item | ε
  for (int k = 1; k <= node.max_count - node.min_count; ++k) {
    Sequence first = {item[0]};
    if (tail >= 0) first.push_back({ElementKind::kRule, tail});
    PAGELLM_ASSIGN_OR_RETURN(tail, helper_rule(owner, {first, {}}));
  }
  if (tail >= 0) out.push_back({ElementKind::kRule, tail});
  return Status::ok();
}

namespace {

// Fixpoint of "every element of some alternative is X", for productive and nullable rules.
template <typename ElementOk>
std::vector<bool> rules_where_some_alternative(const std::vector<std::vector<std::vector<GrammarElement>>>& rules,
                                               ElementOk element_ok) {
  std::vector<bool> result(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (result[r]) continue;
      for (const auto& alternative : rules[r]) {
        bool ok = true;
        for (const auto& el : alternative) ok = ok && element_ok(el, result);
        if (ok) {
          result[r] = changed = true;
          break;
        }
      }
    }
  }
  return result;
}

}  // namespace

Expected<Grammar> GrammarBuilder::build(int32_t root_rule) {
  const size_t num_declared = rules_.size();
  for (const auto& rule : rules_) {
    if (rule.body < 0) return invalid_argument("[structured] rule '{}' is used but never defined", rule.name);
  }
  lowered_.assign(num_declared, {});
  for (size_t r = 0; r < num_declared; ++r) {
    std::vector<Sequence> alternatives;
    const std::string owner = rules_[r].name;  // a copy: helper rules grow rules_
    PAGELLM_RETURN_IF_ERROR(lower_alternatives(rules_[r].body, owner, alternatives));
    lowered_[r] = std::move(alternatives);
  }
  const auto productive = rules_where_some_alternative(lowered_, [&](const GrammarElement& el, const auto& ok) {
    return el.kind == ElementKind::kBytes ? !byte_sets_[static_cast<size_t>(el.value)].empty()
                                   : ok[static_cast<size_t>(el.value)];
  });
  if (!productive[static_cast<size_t>(root_rule)]) {
    return invalid_argument("[structured] the grammar matches no string (rule '{}' can never complete)",
                            rules_[static_cast<size_t>(root_rule)].name);
  }
  for (size_t r = 0; r < lowered_.size(); ++r) {  // drop alternatives that can never complete
    std::erase_if(lowered_[r], [&](const Sequence& seq) {
      for (const auto& el : seq) {
        if (el.kind == ElementKind::kBytes ? byte_sets_[static_cast<size_t>(el.value)].empty()
                                    : !productive[static_cast<size_t>(el.value)]) {
          return true;
        }
      }
      return false;
    });
  }
  const auto nullable = rules_where_some_alternative(lowered_, [](const GrammarElement& el, const auto& ok) {
    return el.kind == ElementKind::kRule && ok[static_cast<size_t>(el.value)];
  });
  // Left recursion: a rule reaching itself through references preceded only by nullable elements.
  std::vector<int> color(lowered_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::string cycle_rule;
  std::function<bool(size_t)> visit = [&](size_t r) {
    color[r] = 1;
    for (const auto& seq : lowered_[r]) {
      for (const auto& el : seq) {
        if (el.kind != ElementKind::kRule) break;
        const auto s = static_cast<size_t>(el.value);
        if (color[s] == 1 || (color[s] == 0 && !visit(s))) {
          if (cycle_rule.empty()) cycle_rule = rules_[s].name;
          return false;
        }
        if (!nullable[s]) break;
      }
    }
    color[r] = 2;
    return true;
  };
  for (size_t r = 0; r < lowered_.size(); ++r) {
    if (color[r] == 0 && !visit(r)) {
      return invalid_argument(
          "[structured] rule '{}' is left-recursive (it must consume a byte before it refers back to itself)",
          cycle_rule);
    }
  }
  Grammar grammar;
  grammar.byte_sets_ = byte_sets_;
  grammar.root_rule_ = root_rule;
  for (size_t r = 0; r < lowered_.size(); ++r) {
    Grammar::Rule rule{rules_[r].name, {}};
    for (const auto& seq : lowered_[r]) {
      rule.alternative_starts.push_back(static_cast<int32_t>(grammar.elements_.size()));
      grammar.elements_.insert(grammar.elements_.end(), seq.begin(), seq.end());
      grammar.elements_.push_back({ElementKind::kEnd, 0});
    }
    grammar.rules_.push_back(std::move(rule));
  }
  return grammar;
}

}  // namespace pagellm::structured
