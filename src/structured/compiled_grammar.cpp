#include "structured/compiled_grammar.h"

#include "structured/token_walker.h"

namespace pagellm::structured {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), automaton_(grammar_) {}

std::shared_ptr<const SuffixMasks> CompiledGrammar::suffix_masks(const std::vector<int32_t>& key) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = suffixes_.find(key); it != suffixes_.end()) return it->second;
  }
  // Computed outside the lock: two threads may both compute one entry, with the same result.
  auto masks = std::make_shared<const SuffixMasks>(compute_suffix_masks(key));
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = suffixes_.emplace(key, masks);
  if (inserted) cached_bytes_ += masks->accepted.bytes() + masks->uncertain.size() * 4;
  return it->second;
}

SuffixMasks CompiledGrammar::compute_suffix_masks(const std::vector<int32_t>& key) const {
  std::lock_guard<std::mutex> lock(automaton_mutex_);  // one walk at a time: they share the automaton
  const FrontierAutomaton::State start = automaton_.state_for_key(key);
  std::vector<uint32_t> accepted(vocab_->mask_words(), 0);
  SuffixMasks masks;
  TokenWalker<FrontierAutomaton> walker(*vocab_, automaton_);
  walker.walk(start, nullptr, [&](size_t index, TokenFate fate) {
    if (fate == TokenFate::kAccepted) set_bit(accepted, vocab_->sorted_id(index));
    if (fate == TokenFate::kUncertain) masks.uncertain.push_back(static_cast<uint32_t>(index));
  });
  masks.accepted = TokenSet::from_bits(accepted, vocab_->size());
  return masks;
}

std::shared_ptr<const TokenSet> CompiledGrammar::find_state_mask(const std::vector<int32_t>& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = states_.find(key);
  return it == states_.end() ? nullptr : it->second;
}

void CompiledGrammar::store_state_mask(const std::vector<int32_t>& key, TokenSet mask) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t bytes = mask.bytes() + key.size() * 4;
  if (state_mask_bytes_ + bytes > kMaxStateMaskBytes) return;
  state_mask_bytes_ += bytes;
  cached_bytes_ += bytes;
  states_.emplace(key, std::make_shared<const TokenSet>(std::move(mask)));
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {suffixes_.size(), states_.size(), cached_bytes_};
}

}  // namespace pagellm::structured
