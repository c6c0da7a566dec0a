#include "engine/draft_proposer.h"

namespace pagellm {

DraftProposals NgramDraftProposer::propose(const std::vector<const Request*>& requests) {
  DraftProposals drafts;
  for (const Request* request : requests) {
    std::vector<TokenId> proposed = propose_ngram_drafts(request->token_ids(), lookup_);
    if (!proposed.empty()) drafts.emplace(request->id(), std::move(proposed));
  }
  return drafts;
}

}  // namespace pagellm
