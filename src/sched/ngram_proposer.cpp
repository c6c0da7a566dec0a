#include "sched/ngram_proposer.h"

#include <algorithm>

namespace pagellm {

std::vector<TokenId> propose_ngram_drafts(std::span<const TokenId> tokens, const NgramLookup& lookup) {
  const int length = static_cast<int>(tokens.size());
  if (lookup.num_drafts < 1) return {};
  for (int n = std::min(lookup.max_n, length - 1); n >= lookup.min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(length - n));
    // Latest start first; an occurrence may overlap the suffix (a run "a a a a" predicts "a").
    for (int start = length - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int first = start + n;
      const int count = std::min(lookup.num_drafts, length - first);
      return std::vector<TokenId>(tokens.begin() + first, tokens.begin() + first + count);
    }
  }
  return {};
}

}  // namespace pagellm
