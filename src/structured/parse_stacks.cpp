#include "structured/parse_stacks.h"

#include <algorithm>

namespace pagellm::structured {

using Kind = GrammarElement::Kind;

int32_t ParseStacks::push_interned(int32_t position, int32_t parent) {
  const uint64_t key = (uint64_t{static_cast<uint32_t>(position)} << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = interned_.emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({position, parent});
  return it->second;
}

void ParseStacks::start(Frontier& out) {
  begin_frontier(out);
  for (int32_t alt : grammar_->rules()[static_cast<size_t>(grammar_->root_rule())].alternative_starts) {
    expand(alt, kRootParent, out);
  }
}

void ParseStacks::expand(int32_t position, int32_t parent, Frontier& out) {
  for (;;) {
    const std::pair<int32_t, int32_t> key{position, parent};
    if (std::find(visited_.begin(), visited_.end(), key) != visited_.end()) return;
    visited_.push_back(key);
    const GrammarElement& el = grammar_->at(position);
    if (el.kind == Kind::kBytes) {
      out.tops.push_back(push(position, parent));
      return;
    }
    if (el.kind == Kind::kRule) {
      const int32_t next = position + 1;
      const int32_t continuation = grammar_->at(next).kind == Kind::kEnd ? parent : push(next, parent);
      for (int32_t alt : grammar_->rules()[static_cast<size_t>(el.value)].alternative_starts) {
        expand(alt, continuation, out);
      }
      return;
    }
    // The end of an alternative: its rule completed, continue at the parent frame.
    if (parent == kRootParent) {
      out.complete = true;
      return;
    }
    if (parent == kBottomParent) {
      out.reached_bottom = true;
      return;
    }
    const StackNode up = node(parent);
    position = up.position;
    parent = up.parent;
  }
}

void ParseStacks::advance(std::span<const int32_t> tops, uint8_t b, Frontier& out) {
  begin_frontier(out);
  for (int32_t top : tops) {
    const StackNode frame = node(top);
    const GrammarElement& el = grammar_->at(frame.position);
    if (grammar_->byte_set(el.value).test(b)) expand(frame.position + 1, frame.parent, out);
  }
}

}  // namespace pagellm::structured
