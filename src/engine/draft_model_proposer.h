// DraftModelProposer: speculative drafts from a second, smaller model (--speculative-config
// {"model": DIR, ...}) on the target's backend, with its own paged KV cache and runner.
//
// Per step, for the requests that may speculate, batched: one forward computes what the draft
// cache lacks of each request's tokens (its whole prompt the first time, afterwards the tokens the
// target accepted since) and samples the first draft greedily; k - 1 single-token forwards sample
// the rest. The draft's cache then holds the request's tokens and drafts 1 .. k - 1; the next call
// keeps the longest prefix that still matches the request's tokens (the accepted drafts) and
// computes from there, so rejected drafts' KV is simply overwritten.
//
//   request   [ p0 ... p(n-1) ]           draft cache  [ p0 ... p(n-1) d1 d2 ]   (k = 3)
//   accepted  [ p0 ... p(n-1) d1 t ]      kept prefix  [ p0 ... p(n-1) d1 ] + computes t, then 2 more
//
// Greedy drafts make the proposal distribution one-hot, so the scheduler's verification keeps the
// target's distribution for any temperature (sched/scheduler.h). A request whose draft KV does not
// fit in the draft cache this step decodes without drafts.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/draft_proposer.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {

// Why `draft` cannot propose for `target`: another vocabulary (size, or a token spelled otherwise
// when both have tokenizers), or a hybrid model (its recurrent state cannot be rolled back).
Status check_draft_model(const Model& draft, const Model& target, const Tokenizer* draft_tokenizer,
                         const Tokenizer* target_tokenizer);

class DraftModelProposer final : public DraftProposer {
 public:
  // The draft cache: num_blocks blocks of block_size tokens (the engine gives it as many as the
  // target's, so whatever the target holds, the draft holds too).
  DraftModelProposer(std::unique_ptr<Model> draft, Backend& backend, int num_blocks, int block_size, int num_drafts);
  ~DraftModelProposer() override;

  DraftProposals propose(const std::vector<const Request*>& requests) override;
  void forget(RequestId id) override;
  bool is_idle() const override;

 private:
  // Rolls request's draft cache back to the longest prefix of its tokens it holds and makes room
  // for the rest and the drafts; the plan row computing the rest, or none when it does not fit.
  std::optional<ScheduledRequest> catch_up_row(const Request& request);

  std::unique_ptr<Model> model_;
  ModelRunner runner_;
  KvCacheManager kv_cache_;
  int block_size_;
  int num_drafts_;
  std::shared_ptr<const SamplingParams> greedy_;
  // Tokens whose KV the draft cache holds, by position.
  std::unordered_map<RequestId, std::vector<TokenId>> cached_tokens_;
  uint64_t next_step_index_ = 0;
};

}  // namespace pagellm
