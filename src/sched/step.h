// StepPlan and StepResult: what one engine step computes, and what the model runner hands back.
// Plain values, free of model details; the runner turns a StepPlan into a packed StepBatch.
//
// One plan row = one request's slice of tokens this step:
//
//   request tokens   [ t0 ........................................ t(N-1) ]
//                     ◀──── computed ────▶◀── token_ids (this step) ──▶◀── rest ──▶
//                                        start_pos                 start_pos + num_new_tokens
//
//   decode           start_pos = N - 1, one token, is_sampling = true
//   prefill chunk    start_pos = 0 or previous chunk end, is_sampling only for the last chunk
//   prefix-cache hit first row starts at start_pos = cached tokens (a multiple of block_size)
//   after preemption start_pos = 0 again; earlier outputs are part of token_ids
//   speculative      start_pos = N - 1, 1 + k tokens: the last sampled one, then k drafts;
//                    is_sampling, and each of the 1 + k positions is sampled (verification)
//
// Packing (DESIGN.md's StepBatch), rows in plan order, b = row index, q_len = token_ids.size():
//
//   token_ids       concat of rows' token_ids                                [T]
//   positions       start_pos, start_pos + 1, ..., start_pos + q_len - 1      [T]
//   cu_seqlens_q    0, q_len(0), q_len(0) + q_len(1), ...                     [B + 1]
//   seq_lens_k      start_pos + q_len  (context length after this step)       [B]
//   block_tables    row.block_tables[g], padded with -1 to the longest        [G][B, max_blocks]
//   slot_mapping    block_tables[g][p / block_size] * block_size + p % block_size  [G][T]  (cache/slot_mapping.h)
//
// G = KV cache groups (cache/kv_cache_groups.h): 1 unless the model mixes full and sliding-window
// layers. All tables of a row have the same length; a sliding group's entries before its window
// are kNoBlock (released), and only positions the step reads or writes are ever looked up.
//   logits_rows     cu_seqlens_q[b + 1] - 1 - k .. cu_seqlens_q[b + 1] - 1 for rows with is_sampling
//                   (k = num_draft_tokens, 0 but for speculative rows)     [num sampled tokens]
//
// Then StepResult::sampled holds one SampledToken per sampled position, in row order (1 + k for a
// speculative row: the target's token after the last sampled token and after each draft), and the
// engine passes both to Scheduler::commit(), which verifies the drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cache/checkpoint_pool.h"
#include "cache/ids.h"
#include "sched/request.h"

namespace pagellm {

struct ScheduledRequest {
  RequestId request_id = 0;
  std::vector<TokenId> token_ids;     // [num_new_tokens] tokens to compute, positions start_pos..
  int start_pos = 0;                  // = the request's num_tokens_computed before this step
  // [G][ceil((start_pos + num_new_tokens) / block_size)]: a copy of each KV cache group's table
  std::vector<std::vector<BlockId>> block_tables;
  bool is_sampling = false;           // after this step every known token is computed: sample one
  bool is_new = false;                // first row since admission (also after preemption): the
                                      // runner (re)initialises per-request state (GDN state slot)
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;          // generated before this step; a counter-based RNG keyed by
                                      // (seed, num_output_tokens) stays batch- and preemption-invariant
  std::shared_ptr<const SamplingParams> sampling;  // never null
  // Structured outputs: a sampling row of a request with a grammar. Marked when the step is planned,
  // so the runner lays out its mask before the mask exists: the engine fills token_mask only after
  // the step before is committed (its token moves the grammar), while this step's forward runs.
  bool needs_token_mask = false;
  // The tokens a marked row may sample ([ceil(vocab / 32)] words, bit v % 32 of word v / 32), set by
  // the engine from the request's grammar; null = any token (all ones for a marked row).
  std::shared_ptr<const std::vector<uint32_t>> token_mask;
  // Prompt + outputs so far (= all tokens of the request), filled only on sampling rows whose
  // params need it (penalties: sampling->needs_token_history()); empty otherwise.
  std::vector<TokenId> history_token_ids;
  // prompt_logprobs (sampling->num_prompt_logprobs): the prompt tokens that positions start_pos,
  // start_pos + 1, ... of this row predict (prompt ids start_pos + 1 ...), one per prompt position
  // of the row but the prompt's last; the runner computes a logits row for each. Empty otherwise.
  std::vector<TokenId> prompt_logprob_targets;
  // Hybrid models' prefix cache: the GDN state an is_new row starts from (the checkpoint of its
  // prefix hit; -1 = zeros), and the checkpoints this row writes (states after some of its tokens).
  int32_t restore_state_checkpoint = -1;
  std::vector<PlannedCheckpoint> state_checkpoints;

  // Speculative decoding: the last num_draft_tokens of token_ids are drafts; the runner samples the
  // target at each of the 1 + num_draft_tokens last positions (draw num_output_tokens + i of the
  // row's seed, penalties over history_token_ids + the drafts before it).
  int num_draft_tokens = 0;

  int num_new_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_sampled_tokens() const { return is_sampling ? 1 + num_draft_tokens : 0; }
  int context_len() const { return start_pos + num_new_tokens(); }  // seq_lens_k
};

struct StepPlan {
  uint64_t step_index = 0;
  int block_size = 0;
  std::vector<ScheduledRequest> rows;  // batch order: running decodes, running prefills, new admissions
  // Preempted during this schedule(): their blocks are gone; drop per-request runner state
  // except what must survive (nothing, if sampling randomness is counter-based).
  std::vector<RequestId> preempted_request_ids;
  // Finished (any reason, abort included) since the previous plan: drop their runner state.
  std::vector<RequestId> finished_request_ids;

  bool empty() const { return rows.empty(); }
  int num_scheduled_tokens() const;
  int num_sampling_rows() const;
  int num_sampled_tokens() const;  // sampling rows + their drafts: the logits rows sampled
};

// Draft tokens proposed for running requests before schedule() (speculative decoding); the
// scheduler takes as many as the token budget and max_tokens allow.
using DraftProposals = std::unordered_map<RequestId, std::vector<TokenId>>;

struct TokenLogprob {
  TokenId token_id = 0;
  float logprob = 0.0f;
};

struct SampledLogprobs {
  float sampled_logprob = 0.0f;     // logprob of the sampled token
  std::vector<TokenLogprob> top;    // [num_logprobs], best first
};

// One sampled position. A speculative row has 1 + k of them in order, all with its request_id.
struct SampledToken {
  RequestId request_id = 0;
  TokenId token_id = 0;
  std::optional<SampledLogprobs> logprobs;  // when the request asked for logprobs
};

// The logprob of one prompt token given the tokens before it, its rank in the vocabulary (1 = the
// most likely; tokens as likely count before it, as vLLM counts), and the top alternatives there.
struct PromptTokenLogprobs {
  TokenId token_id = 0;
  float logprob = 0.0f;
  int64_t rank = 0;
  std::vector<TokenLogprob> top;  // [num_prompt_logprobs], best first
};

// A plan row's prompt_logprob_targets, answered: tokens[i] is prompt token first_prompt_index + i.
struct PromptLogprobs {
  RequestId request_id = 0;
  int first_prompt_index = 0;  // = the row's start_pos + 1
  std::vector<PromptTokenLogprobs> tokens;
};

struct StepResult {
  std::vector<SampledToken> sampled;  // one per sampled position of the plan (num_sampled_tokens), in row order
  std::vector<PromptLogprobs> prompt_logprobs;  // one per row with prompt_logprob_targets, in row order
};

inline int StepPlan::num_scheduled_tokens() const {
  int total = 0;
  for (const ScheduledRequest& row : rows) total += row.num_new_tokens();
  return total;
}

inline int StepPlan::num_sampling_rows() const {
  int total = 0;
  for (const ScheduledRequest& row : rows) total += row.is_sampling ? 1 : 0;
  return total;
}

inline int StepPlan::num_sampled_tokens() const {
  int total = 0;
  for (const ScheduledRequest& row : rows) total += row.num_sampled_tokens();
  return total;
}

}  // namespace pagellm
