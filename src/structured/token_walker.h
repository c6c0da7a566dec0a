// TokenWalker: decides for many tokens at once whether their bytes can follow a frontier, by
// walking the vocabulary in byte order as a trie: consecutive tokens share the parse states of
// their common prefix, and once a prefix is dead every token that extends it is decided without
// looking at its bytes (xgrammar's shared-prefix pruning).
//
// Over a cut-off stack (a per-position cache, kBottomParent below) a token can also be
// kUncertain: some path consumed the cut-off part and had bytes left, so only the full stack
// can tell. Over a full stack (kRootParent below) every token is accepted or rejected.
//
// The walker is generic over how a parse state takes a byte (the Stepper): FrontierStepper
// advances live frontiers in a matcher's arena; the FrontierAutomaton (frontier_automaton.h)
// looks the step up in a table of interned frontiers, which the per-suffix caches use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "structured/parse_stacks.h"
#include "structured/token_vocabulary.h"

namespace pagellm::structured {

enum class TokenFate : uint8_t { kRejected, kAccepted, kUncertain };

// Steps Frontier values through a ParseStacks arena; going back truncates the arena.
class FrontierStepper {
 public:
  using State = Frontier;
  explicit FrontierStepper(ParseStacks& stacks) : stacks_(&stacks) {}
  void step(const State& from, uint8_t byte, State& to) { stacks_->advance(from.tops, byte, to); }
  static bool can_step(const State& s) { return !s.tops.empty(); }
  static bool alive(const State& s) { return s.alive(); }
  static bool reached_bottom(const State& s) { return s.reached_bottom; }
  size_t mark() const { return stacks_->size(); }
  void truncate(size_t mark) { stacks_->truncate(mark); }

 private:
  ParseStacks* stacks_;
};

template <typename Stepper>
class TokenWalker {
 public:
  using State = typename Stepper::State;
  TokenWalker(const TokenVocabulary& vocab, Stepper& stepper) : vocab_(&vocab), stepper_(&stepper) {}

  // Calls on_token(sorted_index, fate) for the accepted and uncertain ones among the sorted
  // indices in `candidates` (ascending), or for
  // the whole vocabulary when candidates is null. Leaves the stacks' arena as it found it.
  template <typename OnToken>
  void walk(const State& start, const std::vector<uint32_t>* candidates, OnToken&& on_token) {
    const size_t arena_start = stepper_->mark();
    level(0).state = start;
    level(0).bottom_seen = false;
    computed_ = 0;
    dead_ = kNone;
    TokenFate dead_fate = TokenFate::kRejected, prev_fate = TokenFate::kRejected;
    std::string_view prev;
    const size_t count = candidates ? candidates->size() : vocab_->num_sorted();
    for (size_t n = 0; n < count; ++n) {
      const size_t index = candidates ? (*candidates)[n] : n;
      const std::string_view bytes = vocab_->sorted_bytes(index);
      const size_t shared = n == 0 ? 0 : candidates ? common_prefix(prev, bytes) : vocab_->lcp(index);
      TokenFate fate;
      if (n > 0 && shared == bytes.size() && shared == prev.size()) {
        fate = prev_fate;  // same bytes as the previous token
      } else if (dead_ != kNone && shared >= dead_) {
        fate = dead_fate;  // extends a dead prefix
      } else {
        go_back_to(std::min(shared, computed_));
        while (computed_ < bytes.size() && stepper_->can_step(level(computed_).state)) step(bytes[computed_]);
        const Level& here = level(computed_);
        if (!stepper_->can_step(here.state)) {
          dead_ = computed_;
          dead_fate = here.bottom_seen ? TokenFate::kUncertain : TokenFate::kRejected;
        }
        if (computed_ < bytes.size()) {
          fate = dead_fate;
        } else {
          fate = stepper_->alive(here.state) ? TokenFate::kAccepted
                 : here.bottom_seen    ? TokenFate::kUncertain
                                       : TokenFate::kRejected;
        }
      }
      if (fate != TokenFate::kRejected) on_token(index, fate);
      prev = bytes;
      prev_fate = fate;
      if (!candidates && fate == TokenFate::kRejected && dead_ != kNone && dead_ >= 1 && dead_ <= bytes.size()) {
        // Every following token with this dead prefix is rejected too: jump past them.
        const size_t end = vocab_->subtree_end(index, dead_);
        if (end > n + 1) {
          n = end - 1;
          prev = vocab_->sorted_bytes(n);
        }
      }
    }
    stepper_->truncate(arena_start);
  }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  struct Level {
    State state{};
    bool bottom_seen = false;  // a cut-off stack ran out at this depth or above (after a byte)
    size_t arena_mark = 0;     // arena size before this level's frames
  };

  Level& level(size_t depth) {
    if (levels_.size() <= depth) levels_.resize(depth + 1);
    return levels_[depth];
  }

  static size_t common_prefix(std::string_view a, std::string_view b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
  }

  void go_back_to(size_t depth) {
    if (depth < computed_) stepper_->truncate(level(depth + 1).arena_mark);
    computed_ = depth;
    if (dead_ != kNone && dead_ > depth) dead_ = kNone;
  }

  void step(char byte) {
    Level& next = level(computed_ + 1);
    const Level& here = levels_[computed_];
    next.arena_mark = stepper_->mark();
    stepper_->step(here.state, static_cast<uint8_t>(byte), next.state);
    next.bottom_seen = here.bottom_seen || stepper_->reached_bottom(next.state);
    ++computed_;
  }

  const TokenVocabulary* vocab_;
  Stepper* stepper_;
  std::vector<Level> levels_;
  size_t computed_ = 0;
  size_t dead_ = kNone;
};

}  // namespace pagellm::structured
