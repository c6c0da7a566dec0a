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
// A hybrid (Gated DeltaNet) draft cannot overwrite its recurrent state the way it overwrites KV: each
// request gets a chain of k states, S_i = the state after the catch-up row (i = 0) and after its i-th
// single-token row, kept as GDN checkpoints of the draft's runner (the checkpoint after a row's last
// token). The next catch-up that keeps j of the cached drafts restarts the request's slot from S_j
// (an is_new row restored from that checkpoint):
//
//   cached    [ p0 ... p(n-1) d1 d2 ]    states S0 (after p(n-1)), S1 (after d1), S2 (after d2)
//   kept      [ p0 ... p(n-1) d1 ]       the slot restarts from S1, the row computes from d1's successor
//
// Greedy drafts make the proposal distribution one-hot, so the scheduler's verification keeps the
// target's distribution for any temperature (sched/scheduler.h). A request whose draft KV does not
// fit in the draft cache this step decodes without drafts, as does one that finds no free state chain.
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
// when both have tokenizers).
Status check_draft_model(const Model& draft, const Model& target, const Tokenizer* draft_tokenizer,
                         const Tokenizer* target_tokenizer);

// The bytes a hybrid draft's recurrent states take for num_chains requests and k drafts (0 for a
// draft without GDN layers).
int64_t draft_state_bytes(const Model& draft, int num_chains, int num_drafts);
// For how many requests at a time (1 .. max_num_seqs) a hybrid draft keeps states: as many as a
// quarter of `budget_bytes` holds.
int draft_state_chains(const Model& draft, int num_drafts, int64_t budget_bytes, int max_num_seqs);

class DraftModelProposer final : public DraftProposer {
 public:
  // The draft cache: num_blocks blocks of block_size tokens (the engine gives it as many as the
  // target's, so whatever the target holds, the draft holds too); a hybrid draft also keeps the
  // recurrent states of up to num_state_chains requests at a time (draft_state_bytes).
  DraftModelProposer(std::unique_ptr<Model> draft, Backend& backend, int num_blocks, int block_size, int num_drafts,
                     int num_state_chains);
  ~DraftModelProposer() override;

  DraftProposals propose(const std::vector<const Request*>& requests) override;
  void forget(RequestId id) override;
  bool is_idle() const override;

 private:
  // A hybrid draft's states of one request: chain `chain` holds S_i in checkpoint chain * k + i;
  // S_0 is the state after position start, and num_states of them were written.
  struct StateChain {
    int32_t chain = 0;
    int start = 0;
    int num_states = 0;
  };

  // Rolls request's draft cache back to the longest prefix of its tokens it holds and makes room
  // for the rest and the drafts; the plan row computing the rest, or none when it does not fit.
  std::optional<ScheduledRequest> catch_up_row(const Request& request);
  // How many of `cached` tokens the draft can keep (a hybrid draft: only where it has a state).
  int keepable(RequestId id, int num_matching) const;
  // A hybrid draft's row keeps the state after its last token as S_i of the request's chain.
  void keep_state(ScheduledRequest& row, int i) const;
  bool is_hybrid() const { return num_chains_ > 0; }

  std::unique_ptr<Model> model_;
  int num_chains_ = 0;  // hybrid drafts: the requests that may speculate at once; 0 otherwise
  ModelRunner runner_;
  KvCacheManager kv_cache_;
  int block_size_;
  int num_drafts_;
  std::shared_ptr<const SamplingParams> greedy_;
  // Tokens whose KV the draft cache holds, by position.
  std::unordered_map<RequestId, std::vector<TokenId>> cached_tokens_;
  std::vector<int32_t> free_chains_;
  std::unordered_map<RequestId, StateChain> chains_;
  uint64_t next_step_index_ = 0;
};

}  // namespace pagellm
