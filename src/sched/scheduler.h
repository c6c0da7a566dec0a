// Scheduler: continuous batching over a paged KV cache. Pure CPU logic; the engine thread is its
// only caller. One rule, no prefill/decode phases: every step gives running requests some of their
// missing tokens within the token budget, then admits waiting requests while budget, seats and
// blocks last.
//
//   engine loop:  add()/abort() ─▶ plan = schedule() ─▶ result = runner.execute(plan)
//                                 ─▶ updates = commit(plan, result) ─▶ publish updates
//   async:        plan N+1 = schedule() and launch it while step N runs; then commit step N
//
// schedule(), in order:
//   1. running requests, decodes (1 missing token) first, then unfinished prefill chunks, each in
//      admission order; each gets min(missing, budget left, long_prefill_token_threshold) tokens.
//      When the KV cache cannot cover a request, the newest running request is preempted (blocks
//      freed, num_tokens_computed = 0, re-queued at the FRONT of the waiting queue) — repeatedly,
//      until the allocation fits or the request preempted is the one asking.
//   2. if nothing was preempted: waiting requests in queue order (FIFO, no overtaking) while
//      budget > 0, running < max_num_seqs and the cache can hold them. Each starts after its cached
//      prefix (prefix caching) and is chunked when it does not fit the budget left. With
//      max_num_partial_prefills, admission stops once that many prompts would be left unfinished by
//      the step; with max_long_partial_prefills, a prompt longer than long_prefill_token_threshold
//      (by length, whatever its cached prefix) is passed over, keeping its place, while that many
//      long prompts are unfinished, so shorter prompts behind it start: the one exception to FIFO
//      (vLLM's concurrent partial prefills).
//
// Token budget example (max_num_batched_tokens = 8, A and B decoding, C a 20-token prompt):
//   step 1: A 1, B 1, C 6 (C[0..6))   step 2: A 1, B 1, C 6 (C[6..12))   step 3: A 1, B 1, C 6
//   step 4: A 1, B 1, C 2 (last chunk: C samples)                          step 5: A, B, C decode
//
// Speculative decoding: schedule(&drafts) gives a decoding request (one missing token, nothing in
// flight) 1 + k tokens, its last sampled token and k of the drafts proposed for it, with k cut to the
// token budget, the long-prefill threshold and max_tokens (a step never yields more tokens than
// max_tokens allows). commit() verifies: drafts are kept while each equals the target's token at
// its position, then the target's token after the last kept one is appended (1 .. k + 1 tokens),
// as vLLM's rejection sampler does for drafts without probabilities: with temperature > 0 the
// target's token at each position is drawn from its own distribution p, so a draft d is kept with
// probability p(d) and, when it is not, the token drawn is distributed as p without d,
// renormalised, which is exactly max(0, p - q) normalised for the one-hot q of a proposed token.
// Every token is therefore distributed as without speculation, and a seeded request draws the
// same uniforms (draw j for its output j) and so the same tokens. Rejected drafts' KV is dropped:
// num_tokens_computed rolls back, and blocks past the kept tokens go back to the pool.
//
// Progress: the oldest running request is never preempted by a younger one, and add() rejects any
// request that could not fit in the whole cache alone (max_blocks_per_request in
// cache/kv_cache_budget.h, which counts a sliding group's window rather than its whole length), so
// every request finishes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "core/status.h"
#include "sched/request.h"
#include "sched/step.h"

namespace pagellm {

struct SchedulerConfig {
  int max_num_seqs = 256;             // running requests at most (rows per step)
  int max_num_batched_tokens = 2048;  // tokens per step at most
  int block_size = 16;
  int num_blocks = 0;                 // KV blocks in the cache (kv_cache_budget.h)
  int max_model_len = 4096;           // prompt + max_tokens at most
  bool enable_prefix_caching = true;  // off for hybrid models
  int long_prefill_token_threshold = 0;  // > 0: at most this many tokens per request per step
  // Concurrent partial prefills (vLLM's names; 0 = no limit, pagellm's default): prompts left
  // unfinished by a step at most, and of those, prompts longer than long_prefill_token_threshold at
  // most (admission order above). max_long_partial_prefills <= max_num_partial_prefills when both are set.
  int max_num_partial_prefills = 0;
  int max_long_partial_prefills = 0;
  // KV cache groups (cache/kv_cache_groups.h): the window of each, kFullAttention (-1) for full
  // attention. Empty = one full-attention group. Each row of a plan carries one block table per group.
  std::vector<int32_t> kv_group_windows;
  // Hybrid (GDN) models: the delta rule's chunk in tokens (> 0 marks a hybrid model). A prefill piece
  // that stops short of the request's end ends on a multiple of it, so a prompt is chunked alike
  // whatever the batch and whatever prefix hit it starts from (bitwise equal outputs); with prefix
  // caching, GDN state checkpoints every checkpoint_interval_tokens (KvCacheConfig) sit on those ends.
  int gdn_chunk_tokens = 0;
  int num_state_checkpoints = 0;
  int checkpoint_interval_tokens = 0;
  int min_recompute_tokens = 1;
  // Note: with max_num_batched_tokens < max_num_seqs, the newest decodes can wait for a step
  // (older requests are served first); correct, but set the budget >= max_num_seqs for fairness.

  Status validate() const;  // "[scheduler] max_num_seqs must be >= 1, got 0"
  // Tokens one request gets per step at most.
  int max_step_tokens() const;
};

// One request's news from a commit: a new token, a finish, or both.
struct RequestUpdate {
  RequestId request_id = 0;
  std::optional<TokenId> new_token_id;
  std::optional<SampledLogprobs> logprobs;
  std::optional<FinishReason> finish_reason;  // set once, on the request's last update
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;                  // including new_token_id
  int num_prefix_cached_tokens = 0;           // prefix-cache hit at the last admission
};

struct SchedulerStats {
  int num_running = 0;
  int num_waiting = 0;  // preempted ones included
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  int64_t prefix_cache_query_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int num_kv_blocks_used = 0;   // all groups (one pool)
  int num_kv_blocks_total = 0;
  // Speculative decoding, as vLLM's spec_decode counters: rows that carried drafts, drafts, drafts
  // accepted, and accepted drafts by position (index i: the (i + 1)-th draft of a row).
  int64_t num_spec_drafts = 0;
  int64_t num_spec_draft_tokens = 0;
  int64_t num_spec_accepted_tokens = 0;
  std::vector<int64_t> num_spec_accepted_per_position;
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);  // config must validate() (CHECKed)

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Rejected up front (kInvalidArgument) when its id is live, its prompt is
  // empty, its sampling params are invalid, prompt + max_tokens > max_model_len, or its longest
  // possible KV (prompt + max_tokens - 1 tokens) exceeds the whole cache.
  Status add(Request request);

  // Ends a live request now (any state) and frees its blocks. kNotFound for unknown/finished ids.
  // The caller publishes the finish itself (commit() never reports it); the id appears in the
  // next plan's finished_request_ids so the runner drops its per-request state.
  Status abort(RequestId request_id) { return finish_early(request_id, FinishReason::kAbort); }
  // Same for reasons found outside the scheduler (kStop: a stop string matched in the text).
  Status finish_early(RequestId request_id, FinishReason reason);

  // The next step. Empty rows when nothing can run. At most one step may be uncommitted when it
  // is called: synchronous engines commit each step before planning the next; async ones plan
  // step N+1 while step N runs. A row may then carry kPlaceholderToken: the token step N samples
  // for that request (a decode's input, and the last entry of its history_token_ids), which the
  // runner takes from step N's device-side ids. A request whose step N samples its max_tokens-th
  // token is not scheduled in step N+1; one that stops at an EOS or stop id in step N has a
  // wasted row in step N+1, dropped at commit. abort() between schedule and commit is allowed.
  // With `drafts` (speculative decoding), decoding requests may compute some of theirs this step.
  StepPlan schedule(const DraftProposals* drafts = nullptr);

  // Applies a step's outcome (a no-op for an empty plan), steps in order: computed blocks enter the prefix cache, placeholders
  // become the sampled tokens, stop checks. Returns one update per sampling row of a still-live
  // request, in row order. Finished requests are freed and forgotten (find() returns null).
  std::vector<RequestUpdate> commit(const StepPlan& plan, const StepResult& result);

  const Request* find(RequestId request_id) const;
  // Running requests, oldest admission first (speculative proposers read their tokens).
  const std::vector<Request*>& running_requests() const { return running_; }
  bool has_unfinished_requests() const { return !requests_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv_cache() const { return kv_cache_; }

  // Leak check: no live request, no used block, every ref count zero.
  bool is_leak_free() const { return requests_.empty() && kv_cache_.is_leak_free(); }

 private:
  struct Scheduled {
    Request* request;
    int num_new_tokens;
    bool is_new;
    int32_t restore_state_checkpoint = -1;
    std::span<const TokenId> drafts = {};  // the last drafts.size() of num_new_tokens
  };

  int token_quota(const Request& request, int budget) const;
  // Hybrid models: a piece that stops before the request's end shortened to end on a GDN chunk.
  // (start = the piece's first position; a piece of all missing tokens stays whole.)
  int align_to_gdn_chunks(int start, int num_tokens, int num_missing_tokens) const;
  // The tokens of a request whose KV and GDN state may enter the prefix cache.
  int num_cacheable_tokens(const Request& request) const;
  // The drafts a decoding request computes this step: a prefix of its proposal that fits.
  std::span<const TokenId> draft_quota(const Request& request, int budget, const DraftProposals* drafts) const;
  void schedule_running(std::vector<Scheduled>& scheduled, int& budget, StepPlan& plan, const DraftProposals* drafts);
  // Commit of one sampling row's tokens (1 + its drafts); returns the updates, one per kept token.
  void commit_sampled(Request* request, const ScheduledRequest& row, std::span<const SampledToken> sampled,
                      std::vector<RequestUpdate>& updates);
  void admit_waiting(std::vector<Scheduled>& scheduled, int& budget);
  // A prompt past long_prefill_token_threshold (max_long_partial_prefills counts these).
  bool is_long_prompt(const Request& request) const;
  void preempt(Request* victim, std::vector<Scheduled>& scheduled, int& budget, StepPlan& plan);
  ScheduledRequest make_row(const Scheduled& entry);  // reserves the row's GDN checkpoints
  void finish(Request* request, FinishReason reason);

  SchedulerConfig config_;
  KvCacheManager kv_cache_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // every live request
  std::vector<Request*> running_;  // admission order: the back is the newest (the next victim)
  std::deque<Request*> waiting_;   // front is admitted next; preempted requests go to the front
  std::vector<RequestId> finished_since_plan_;
  uint64_t next_arrival_index_ = 0;
  uint64_t num_steps_ = 0;
  std::deque<uint64_t> uncommitted_steps_;  // scheduled, not committed: at most 2 (one planned ahead)
  int64_t num_preemptions_ = 0;
  int64_t num_spec_drafts_ = 0, num_spec_draft_tokens_ = 0, num_spec_accepted_tokens_ = 0;
  std::vector<int64_t> num_spec_accepted_per_position_;
};

}  // namespace pagellm
