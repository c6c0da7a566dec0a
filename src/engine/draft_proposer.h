// DraftProposer: the speculative-decoding proposers (--speculative-config). Before each step the
// engine asks for drafts for the decoding requests that may speculate (running, one missing token,
// no grammar); the scheduler takes what fits (sched/scheduler.h) and the target verifies them in
// the step's one forward.
//
//   ngram        propose_ngram_drafts over the request's prompt + outputs (sched/ngram_proposer.h)
//   draft_model  a second, smaller model with its own KV cache proposes k tokens greedily
//                (draft_model_proposer.h)
//   mtp          the target checkpoint's multi-token-prediction head (mtp_proposer.h)
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "sched/ngram_proposer.h"
#include "sched/request.h"
#include "sched/step.h"

namespace pagellm {

// A request of the scheduler by id, or null when it has ended.
using RequestLookup = std::function<const Request*(RequestId)>;

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // The target's step `plan` was committed (its forward is the target's last one).
  virtual void after_step(const StepPlan& plan, const RequestLookup& find) {}
  // Drafts for each of `requests` that has some; all are running, one token missing, none in flight.
  virtual DraftProposals propose(const std::vector<const Request*>& requests) = 0;
  // A request ended (finished or aborted) or was preempted: drop what is kept for it.
  virtual void forget(RequestId) {}
  // Leak check: nothing is kept for any request.
  virtual bool is_idle() const { return true; }
};

// A greedy row of a draft runner: `tokens` at start_pos .. of request `id`, over its block tables in
// `cache`.
ScheduledRequest greedy_draft_row(const KvCacheManager& cache, RequestId id, std::vector<TokenId> tokens,
                                  int start_pos, const std::shared_ptr<const SamplingParams>& greedy);
// Greedy sampling parameters, shared by a draft runner's rows.
std::shared_ptr<const SamplingParams> greedy_sampling_params();

class NgramDraftProposer final : public DraftProposer {
 public:
  explicit NgramDraftProposer(const NgramLookup& lookup) : lookup_(lookup) {}
  DraftProposals propose(const std::vector<const Request*>& requests) override;

 private:
  NgramLookup lookup_;
};

}  // namespace pagellm
