#include "structured/grammar_matcher.h"

#include <algorithm>

#include "core/check.h"

#include "structured/token_walker.h"

namespace pagellm::structured {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar, bool use_state_cache)
    : grammar_(std::move(grammar)), stacks_(grammar_->grammar()), use_state_cache_(use_state_cache) {
  reset();
}

void GrammarMatcher::reset() {
  stacks_.truncate(0);
  history_.clear();
  stacks_.start(a_);
  history_.push_back(State{a_.tops, a_.complete, false, 0});
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const TokenVocabulary& vocab = grammar_->vocab();
  if (is_terminated()) return false;
  if (vocab.is_stop(token_id)) {
    if (!is_complete()) return false;
    State done = current();
    done.tops.clear();
    done.terminated = true;
    done.arena_size = stacks_.size();
    history_.push_back(std::move(done));
    return true;
  }
  if (!vocab.is_text(token_id)) return false;
  return advance_bytes(vocab.token_bytes(token_id));
}

bool GrammarMatcher::accept_text(std::string_view text) {
  if (is_terminated()) return false;
  return text.empty() || advance_bytes(text);
}

bool GrammarMatcher::advance_bytes(std::string_view bytes) {
  const size_t arena_before = stacks_.size();
  a_.tops = current().tops;
  for (char c : bytes) {
    if (a_.tops.empty()) {
      stacks_.truncate(arena_before);
      return false;
    }
    stacks_.advance(a_.tops, static_cast<uint8_t>(c), b_);
    std::swap(a_, b_);
  }
  if (!a_.alive()) {
    stacks_.truncate(arena_before);
    return false;
  }
  history_.push_back(State{a_.tops, a_.complete, false, arena_before});
  return true;
}

bool GrammarMatcher::rollback(size_t num_tokens) {
  if (num_tokens > num_accepted_tokens()) return false;
  for (size_t i = 0; i < num_tokens; ++i) {
    stacks_.truncate(history_.back().arena_size);
    history_.pop_back();
  }
  return true;
}

std::vector<int32_t> GrammarMatcher::suffix_key(int32_t top) const {
  std::vector<int32_t> key;
  int32_t frame = top;
  for (int depth = 0; depth < CompiledGrammar::kSuffixDepth && frame >= 0; ++depth) {
    key.push_back(stacks_.node(frame).position);
    frame = stacks_.node(frame).parent;
  }
  key.push_back(frame == kRootParent ? kRootParent : kBottomParent);
  return key;
}

// Every top's whole stack, sorted so that equal states give equal keys however they were reached.
std::vector<int32_t> GrammarMatcher::state_key(const State& state) const {
  std::vector<std::vector<int32_t>> chains;
  chains.reserve(state.tops.size());
  for (int32_t top : state.tops) {
    std::vector<int32_t> chain;
    for (int32_t frame = top; frame >= 0; frame = stacks_.node(frame).parent) {
      chain.push_back(stacks_.node(frame).position);
    }
    chains.push_back(std::move(chain));
  }
  std::sort(chains.begin(), chains.end());
  chains.erase(std::unique(chains.begin(), chains.end()), chains.end());
  std::vector<int32_t> key;
  for (const auto& chain : chains) {
    key.insert(key.end(), chain.begin(), chain.end());
    key.push_back(-1);
  }
  return key;
}

void GrammarMatcher::fill_next_token_bitmask(std::span<uint32_t> words) {
  CHECK_MSG(words.size() >= mask_words(), "token bitmask of {} words, the vocabulary needs {}", words.size(),
            mask_words());
  std::fill(words.begin(), words.end(), 0u);
  const State& state = current();
  const TokenVocabulary& vocab = grammar_->vocab();
  if (!state.terminated && !state.tops.empty()) {
    if (!use_state_cache_) {
      compute_mask(state, words);
    } else if (const std::vector<int32_t> key = state_key(state); auto cached = grammar_->find_state_mask(key)) {
      cached->add_to(words);
    } else {
      compute_mask(state, words);
      grammar_->store_state_mask(key, TokenSet::from_bits(words, vocab.size()));
    }
  }
  if (state.complete || state.terminated) {
    for (int32_t id : vocab.stop_token_ids()) set_bit(words, id);
  }
}

// Context-independent tokens from the suffix caches, then the uncertain ones walked against the
// full stacks.
void GrammarMatcher::compute_mask(const State& state, std::span<uint32_t> words) {
  uncertain_.clear();
  for (int32_t top : state.tops) {
    const auto masks = grammar_->suffix_masks(suffix_key(top));
    masks->accepted.add_to(words);
    uncertain_.insert(uncertain_.end(), masks->uncertain.begin(), masks->uncertain.end());
  }
  if (uncertain_.empty()) return;
  const TokenVocabulary& vocab = grammar_->vocab();
  std::sort(uncertain_.begin(), uncertain_.end());
  uncertain_.erase(std::unique(uncertain_.begin(), uncertain_.end()), uncertain_.end());
  std::erase_if(uncertain_, [&](uint32_t index) { return test_bit(words, vocab.sorted_id(index)); });
  Frontier start;
  start.tops = state.tops;
  FrontierStepper stepper(stacks_);
  TokenWalker<FrontierStepper> walker(vocab, stepper);
  walker.walk(start, &uncertain_, [&](size_t index, TokenFate fate) {
    if (fate == TokenFate::kAccepted) set_bit(words, vocab.sorted_id(index));
  });
}

}  // namespace pagellm::structured
