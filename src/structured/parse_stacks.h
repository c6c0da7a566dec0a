// ParseStacks: the pushdown matcher's persistent stacks over a Grammar.
//
// A stack is a chain of frames; a frame is (position in the grammar, parent frame), where the
// parent is the frame to continue at when the frame's rule completes. Frames are never changed,
// only appended, so many stacks share their lower parts (a tree), a state of the matcher is just
// a list of top frames (the "frontier"), and going back (rollback, the end of a trie branch) is
// truncating the arena. Every top frame sits on a byte class: expansion through rule references
// and completed rules happens eagerly. A reference in the last place of an alternative does not
// push a frame (tail call), so right-recursive repetitions run in constant stack depth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace pagellm::structured {

struct StackNode {
  int32_t position = 0;
  int32_t parent = 0;  // a frame index, or kRootParent / kBottomParent
};
// The root rule's frames return here: reaching it means the text so far is a whole sentence.
inline constexpr int32_t kRootParent = -1;
// A stack cut off below (the per-position caches): reaching it means "depends on the context".
inline constexpr int32_t kBottomParent = -2;

struct Frontier {
  std::vector<int32_t> tops;    // frames on byte classes
  bool complete = false;        // the root rule completed
  bool reached_bottom = false;  // a cut-off stack ran out
  void clear() {
    tops.clear();
    complete = reached_bottom = false;
  }
  bool alive() const { return !tops.empty() || complete || reached_bottom; }
};

class ParseStacks {
 public:
  explicit ParseStacks(const Grammar& grammar) : grammar_(&grammar) {}

  const Grammar& grammar() const { return *grammar_; }
  int32_t push(int32_t position, int32_t parent) {
    if (interning_) return push_interned(position, parent);
    nodes_.push_back({position, parent});
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  // From now on equal frames get one index, so equal stacks are equal indices (the automaton's
  // canonical frontiers). Such an arena only grows.
  void enable_interning() { interning_ = true; }
  const StackNode& node(int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  void truncate(size_t size) { nodes_.resize(size); }

  // The frontier of the empty text: the root rule's alternatives over kRootParent.
  void start(Frontier& out);
  // Adds the frames that (position, parent) expands to; call begin_frontier first.
  void begin_frontier(Frontier& out) {
    out.clear();
    visited_.clear();
  }
  void expand(int32_t position, int32_t parent, Frontier& out);
  // The frontier after byte `b`, from the given tops.
  void advance(std::span<const int32_t> tops, uint8_t b, Frontier& out);

 private:
  int32_t push_interned(int32_t position, int32_t parent);

  const Grammar* grammar_;
  std::vector<StackNode> nodes_;
  bool interning_ = false;
  std::unordered_map<uint64_t, int32_t> interned_;  // (position, parent) -> frame
  std::vector<std::pair<int32_t, int32_t>> visited_;  // (position, parent) expanded into this frontier
};

}  // namespace pagellm::structured
