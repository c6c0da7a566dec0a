// TokenWalker: decides for many tokens at once whether their bytes can follow a frontier, by
// walking the vocabulary in byte order as a trie: consecutive tokens share the parse states of
// their common prefix, and once a prefix is dead every token that extends it is decided without
// looking at its bytes (xgrammar's shared-prefix pruning).
//
// Over a cut-off stack (a per-position cache, kBottomParent below) a token can also be
// kUncertain: some path consumed the cut-off part and had bytes left, so only the full stack
// can tell. Over a full stack (kRootParent below) every token is accepted or rejected.
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

class TokenWalker {
 public:
  TokenWalker(const TokenVocabulary& vocab, ParseStacks& stacks) : vocab_(&vocab), stacks_(&stacks) {}

  // Calls on_token(sorted_index, fate) for every sorted index in `candidates` (ascending), or for
  // the whole vocabulary when candidates is null. Leaves the stacks' arena as it found it.
  template <typename OnToken>
  void walk(const Frontier& start, const std::vector<uint32_t>* candidates, OnToken&& on_token) {
    const size_t arena_start = stacks_->size();
    level(0).frontier = start;
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
        while (computed_ < bytes.size() && !level(computed_).frontier.tops.empty()) step(bytes[computed_]);
        const Level& here = level(computed_);
        if (here.frontier.tops.empty()) {
          dead_ = computed_;
          dead_fate = here.bottom_seen ? TokenFate::kUncertain : TokenFate::kRejected;
        }
        if (computed_ < bytes.size()) {
          fate = dead_fate;
        } else {
          fate = here.frontier.alive() ? TokenFate::kAccepted
                 : here.bottom_seen    ? TokenFate::kUncertain
                                       : TokenFate::kRejected;
        }
      }
      on_token(index, fate);
      prev = bytes;
      prev_fate = fate;
    }
    stacks_->truncate(arena_start);
  }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  struct Level {
    Frontier frontier;
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
    if (depth < computed_) stacks_->truncate(level(depth + 1).arena_mark);
    computed_ = depth;
    if (dead_ != kNone && dead_ > depth) dead_ = kNone;
  }

  void step(char byte) {
    Level& next = level(computed_ + 1);
    const Level& here = levels_[computed_];
    next.arena_mark = stacks_->size();
    stacks_->advance(here.frontier.tops, static_cast<uint8_t>(byte), next.frontier);
    next.bottom_seen = here.bottom_seen || next.frontier.reached_bottom;
    ++computed_;
  }

  const TokenVocabulary* vocab_;
  ParseStacks* stacks_;
  std::vector<Level> levels_;
  size_t computed_ = 0;
  size_t dead_ = kNone;
};

}  // namespace pagellm::structured
