// GrammarMatcher: one request's position in a CompiledGrammar, token by token.
//
// Owned by the running request and used by the engine thread only: fill_next_token_bitmask
// before a step, accept_token after the step commits the sampled token, rollback when
// speculative tokens are rejected. States are the persistent stacks of parse_stacks.h, so
// accepting a token costs its bytes and rollback is popping saved frontiers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/parse_stacks.h"

namespace pagellm::structured {

class GrammarMatcher {
 public:
  // use_state_cache = false skips the whole-state mask cache (benchmarks of the suffix path).
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, bool use_state_cache = true);

  // Advances by one token. False (and no change) when the grammar does not allow it: a special
  // token, a stop token before the grammar is complete, or text that leaves the grammar.
  // A stop token at a complete state terminates the matcher.
  bool accept_token(int32_t token_id);
  // Advances by raw text (tests, forced prefixes); false and no change when not allowed.
  bool accept_text(std::string_view text);

  // Bit i of words (words[i / 32] >> (i % 32)) is set when token i may come next. Needs at least
  // mask_words() words; words past the vocabulary are cleared. Stop tokens are set only when the
  // text so far is complete; after termination only they are set.
  void fill_next_token_bitmask(std::span<uint32_t> words);
  size_t mask_words() const { return grammar_->vocab().mask_words(); }

  // The text so far is a whole sentence (a stop token may come next).
  bool is_complete() const { return current().complete; }
  // A stop token was accepted; nothing more may come.
  bool is_terminated() const { return current().terminated; }
  size_t num_accepted_tokens() const { return history_.size() - 1; }
  // Undoes the last num_tokens accepted tokens (speculative decoding); false when there are fewer.
  bool rollback(size_t num_tokens);
  void reset();

  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  struct State {
    std::vector<int32_t> tops;
    bool complete = false;
    bool terminated = false;
    size_t arena_size = 0;  // the arena before this state's frames were added (for rollback)
  };

  const State& current() const { return history_.back(); }
  bool advance_bytes(std::string_view bytes);
  std::vector<int32_t> state_key(const State& state) const;
  std::vector<int32_t> suffix_key(int32_t top) const;
  void compute_mask(const State& state, std::span<uint32_t> words);

  std::shared_ptr<const CompiledGrammar> grammar_;
  ParseStacks stacks_;
  std::vector<State> history_;  // [0] is the start; back() is now
  Frontier a_, b_;              // scratch frontiers
  std::vector<uint32_t> uncertain_;
  bool use_state_cache_ = true;
};

}  // namespace pagellm::structured
