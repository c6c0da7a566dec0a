#include "engine/draft_proposer.h"

namespace pagellm {

ScheduledRequest greedy_draft_row(const KvCacheManager& cache, RequestId id, std::vector<TokenId> tokens,
                                  int start_pos, const std::shared_ptr<const SamplingParams>& greedy) {
  ScheduledRequest row;
  row.request_id = id;
  row.start_pos = start_pos;
  row.token_ids = std::move(tokens);
  row.is_sampling = true;
  row.is_new = start_pos == 0;
  row.num_prompt_tokens = row.context_len();
  row.sampling = greedy;
  for (int g = 0; g < cache.num_groups(); ++g) {
    const auto table = cache.block_table(id, g);
    row.block_tables.emplace_back(table.begin(), table.end());
  }
  return row;
}

std::shared_ptr<const SamplingParams> greedy_sampling_params() {
  SamplingParams params;
  params.temperature = 0.0f;
  return std::make_shared<const SamplingParams>(params);
}

DraftProposals NgramDraftProposer::propose(const std::vector<const Request*>& requests) {
  DraftProposals drafts;
  for (const Request* request : requests) {
    std::vector<TokenId> proposed = propose_ngram_drafts(request->token_ids(), lookup_);
    if (!proposed.empty()) drafts.emplace(request->id(), std::move(proposed));
  }
  return drafts;
}

}  // namespace pagellm
