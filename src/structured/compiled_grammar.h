// CompiledGrammar: a Grammar bound to a TokenVocabulary, plus the mask caches that every matcher
// of that grammar shares. Immutable in meaning; the caches fill lazily under a mutex, so one
// CompiledGrammar may serve matchers on several threads.
//
// Two caches (xgrammar's split, with a second level on top):
//   - per stack suffix: the top frame's position plus the positions of up to kSuffixDepth - 1
//     frames below it. Walking the whole vocabulary over that cut-off stack gives the tokens
//     accepted whatever lies below (context-independent), the rejected ones, and the uncertain
//     rest, which a matcher checks at run time against its full stack (context-dependent).
//     Suffixes repeat across requests and across depths of recursive grammars.
//   - per whole matcher state (all top stacks, every position to the root): the finished mask.
//     A schema's generation visits a bounded set of states, so after the first requests most
//     masks are one lookup and a copy.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "structured/frontier_automaton.h"
#include "structured/grammar.h"
#include "structured/token_set.h"
#include "structured/token_vocabulary.h"

namespace pagellm::structured {

struct SuffixMasks {
  TokenSet accepted;                // token ids accepted whatever the context
  std::vector<uint32_t> uncertain;  // sorted-vocabulary indices to check against the full stack
};

struct PositionsHash {
  size_t operator()(const std::vector<int32_t>& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t v : key) h = (h ^ static_cast<uint32_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

class CompiledGrammar {
 public:
  static constexpr int kSuffixDepth = 4;
  // Past this many bytes of whole-state masks (per grammar), new states' masks are computed each
  // time instead of kept: recursive grammars (json_object) have unboundedly many states.
  static constexpr size_t kMaxStateMaskBytes = size_t{32} << 20;

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const std::shared_ptr<const TokenVocabulary>& vocab_ptr() const { return vocab_; }

  // Key: positions from the top frame down, then kRootParent (the stack ended) or kBottomParent.
  std::shared_ptr<const SuffixMasks> suffix_masks(const std::vector<int32_t>& key) const;
  std::shared_ptr<const TokenSet> find_state_mask(const std::vector<int32_t>& key) const;
  void store_state_mask(const std::vector<int32_t>& key, TokenSet mask) const;

  struct CacheStats {
    size_t suffixes = 0, states = 0, bytes = 0;
  };
  CacheStats cache_stats() const;

 private:
  SuffixMasks compute_suffix_masks(const std::vector<int32_t>& key) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const SuffixMasks>, PositionsHash> suffixes_;
  mutable std::unordered_map<std::vector<int32_t>, std::shared_ptr<const TokenSet>, PositionsHash> states_;
  mutable size_t cached_bytes_ = 0;        // both caches
  mutable size_t state_mask_bytes_ = 0;
  mutable std::mutex automaton_mutex_;
  mutable FrontierAutomaton automaton_;  // the suffix walks' DFA, built as they go
};

}  // namespace pagellm::structured
