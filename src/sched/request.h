// Request: one generation as the scheduler tracks it — tokens, progress, status, sampling params.
//
// State machine (the scheduler drives every transition; the engine only reads):
//
//   add() ─▶ kWaiting ──admit──▶ kRunning ──commit: EOS / stop id / max_tokens──▶ kFinishedStopped
//                ▲                  │                                             kFinishedLength
//                │              preempt (blocks freed, num_tokens_computed = 0)
//                └──── kPreempted ◀─┘   (re-queued at the front of the waiting queue)
//   abort() from any live state ──▶ kFinishedAborted (blocks freed at once)
//
// Tokens are one sequence, prompt then outputs:
//
//   token_ids   [p0 p1 ... p(P-1) | o0 o1 ... o(O-1)]
//                ◀── computed ──▶◀── missing ──▶       num_tokens_computed ≤ num_tokens = P + O
//
// A running request always misses at least one token: the last sampled one has no KV yet.
// After preemption all tokens are missing again and outputs are recomputed like prompt tokens.
//
// Steps in flight (async scheduling: step N+1 is planned before step N's tokens are known): a
// scheduled step counts its tokens as computed at once (their KV is written by a step queued on the
// device), and each sampling row adds an output placeholder, a token that exists but whose value
// arrives with its step's commit. The next step may schedule a placeholder as its input (the
// runner takes it from the device); commit() replaces the placeholder with the sampled token.
//
//   token_ids   [p0 ... p(P-1) | o0 ... o(O-1) | ? ]       ? = placeholder (num_output_placeholders = 1)
//                ◀────── computed (in flight included) ──────▶
//
// Speculative decoding (synchronous steps only): a decode row also computes k draft tokens after
// the last sampled one; they count as planned and computed while the step runs. Its commit keeps
// the drafts the target agreed with plus the target's own next token, and rolls num_tokens_computed
// back to the tokens kept (the last one, as always, has no KV yet):
//
//   scheduled   [ ... o(O-1) | d1 d2 d3 ]   computed = all, num_draft_tokens_in_flight = 3
//   committed   [ ... o(O-1) | d1 t ]        d1 accepted, d2 rejected: t = the target's token there
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cache/ids.h"
#include "core/status.h"

namespace pagellm {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // waiting again, after preemption
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

// OpenAI finish_reason: "stop", "length", "abort".
enum class FinishReason { kStop, kLength, kAbort };

std::string_view finish_reason_name(FinishReason reason);
std::string_view request_status_name(RequestStatus status);
bool is_finished(RequestStatus status);
RequestStatus finished_status(FinishReason reason);

// What the sampler needs for one request, plus the stop conditions the scheduler checks.
struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy
  float top_p = 1.0f;              // (0, 1]; 1 = off
  int top_k = 0;                   // 0 or -1 = off
  float min_p = 0.0f;              // [0, 1]; 0 = off
  std::optional<uint64_t> seed;    // same seed + same prompt ⇒ same tokens, alone or in a batch
  int max_tokens = 16;             // ≥ 1 output tokens at most
  int min_tokens = 0;              // EOS and stop_token_ids do not stop before this many outputs
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  std::vector<TokenId> eos_token_ids;  // from the checkpoint (set by the engine, not by users)
  float presence_penalty = 0.0f;       // [-2, 2], on output tokens
  float frequency_penalty = 0.0f;      // [-2, 2], on output tokens
  float repetition_penalty = 1.0f;     // > 0, on prompt + output tokens; 1 = off
  std::optional<int> num_logprobs;     // top-K alternatives per sampled token; nullopt = none
  // prompt_logprobs: top-K alternatives (and the prompt token itself) at every prompt position;
  // nullopt = none. Such a request never reads the prefix cache (each position's logits are needed).
  std::optional<int> num_prompt_logprobs;
  std::vector<std::pair<TokenId, float>> logit_bias;  // added to those tokens' logits before sampling

  bool is_greedy() const { return temperature == 0.0f; }
  // True when sampling depends on earlier tokens (penalties): the plan then carries the history.
  bool needs_token_history() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
  Status validate() const;  // "[sampling] top_p must be in (0, 1], got 1.5"
};

class Request {
 public:
  Request(RequestId id, std::vector<TokenId> prompt_token_ids, SamplingParams sampling);

  RequestId id() const { return id_; }
  RequestStatus status() const { return status_; }
  const SamplingParams& sampling() const { return *sampling_; }
  // Shared and immutable, so a StepPlan row can carry it without copying the stop-token lists.
  const std::shared_ptr<const SamplingParams>& sampling_ptr() const { return sampling_; }

  std::span<const TokenId> token_ids() const { return token_ids_; }  // prompt + outputs
  std::span<const TokenId> prompt_token_ids() const;
  std::span<const TokenId> output_token_ids() const;
  int num_tokens() const { return static_cast<int>(token_ids_.size()); }  // known tokens
  int num_prompt_tokens() const { return num_prompt_tokens_; }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }  // known outputs
  // Sampled by scheduled steps, not committed yet (0 or 1: at most one step is planned ahead).
  int num_output_placeholders() const { return num_output_placeholders_; }
  // Known tokens + placeholders + drafts in flight: the sequence the scheduler plans over.
  int num_planned_tokens() const { return num_tokens() + num_output_placeholders_ + num_draft_tokens_in_flight_; }
  int num_draft_tokens_in_flight() const { return num_draft_tokens_in_flight_; }
  // KV in the cache or being written by a scheduled step.
  int num_tokens_computed() const { return num_tokens_computed_; }
  int num_missing_tokens() const { return num_planned_tokens() - num_tokens_computed_; }

  uint64_t arrival_index() const { return arrival_index_; }
  int num_preemptions() const { return num_preemptions_; }
  int num_prefix_cached_tokens() const { return num_prefix_cached_tokens_; }  // at last admission

  // After appending the last sampled token: why the request ends now, if it does. Order as vLLM:
  // nothing before min_tokens; then EOS (unless ignore_eos), stop_token_ids, max_tokens.
  std::optional<FinishReason> stop_reason() const;

  // --- transitions, called by the Scheduler only ---
  void set_arrival_index(uint64_t index) { arrival_index_ = index; }
  void admit(int num_prefix_cached_tokens);
  void preempt();
  // A step scheduled num_tokens more of this request (and samples after them when is_sampling); the
  // last num_draft_tokens of them are speculative drafts (a sampling row only).
  void schedule_tokens(int num_tokens, bool is_sampling, int num_draft_tokens = 0);
  // Commit of a sampling row: its placeholder becomes token_id. Also for a request preempted
  // since that step was planned: the token was sampled before its blocks were freed.
  void append_output(TokenId token_id) { (void)append_outputs(std::span<const TokenId>(&token_id, 1)); }
  // The same for a speculative row: token_ids = the accepted drafts, then the target's token. The
  // drafts in flight end (num_tokens_computed rolls back to the tokens kept), tokens are appended
  // up to the first that stops the request (stop_reason()); returns how many were appended.
  int append_outputs(std::span<const TokenId> token_ids);
  void finish(FinishReason reason);

 private:
  RequestId id_;
  std::vector<TokenId> token_ids_;  // prompt then outputs
  int num_prompt_tokens_;
  std::shared_ptr<const SamplingParams> sampling_;
  RequestStatus status_ = RequestStatus::kWaiting;
  int num_tokens_computed_ = 0;     // tokens whose KV is in the cache or queued to be written
  int num_output_placeholders_ = 0;
  int num_draft_tokens_in_flight_ = 0;
  uint64_t arrival_index_ = 0;
  int num_preemptions_ = 0;
  int num_prefix_cached_tokens_ = 0;
};

}  // namespace pagellm
