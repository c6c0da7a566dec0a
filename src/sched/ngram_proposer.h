// Prompt-lookup (n-gram) drafts: the tokens that followed the latest earlier occurrence of the
// sequence's suffix. Longest suffix first, from prompt_lookup_max down to prompt_lookup_min:
//
//   tokens   a b c d x y a b c d ?          suffix "a b c d" (n = 4) occurred at 0
//                    ▲                      drafts = the k tokens after it: x y a ...
//
// The latest occurrence wins (the most recent context predicts best); a match near the end gives
// fewer than k drafts (as many tokens as follow it). Pure host code over the request's prompt and
// outputs; O(prompt_lookup_max * length) per call.
#pragma once

#include <span>
#include <vector>

#include "cache/ids.h"

namespace pagellm {

struct NgramLookup {
  int min_n = 1;  // prompt_lookup_min
  int max_n = 1;  // prompt_lookup_max
  int num_drafts = 1;  // k
};

// [0, k] draft tokens; empty when no suffix of length in [min_n, max_n] occurred before.
std::vector<TokenId> propose_ngram_drafts(std::span<const TokenId> tokens, const NgramLookup& lookup);

}  // namespace pagellm
