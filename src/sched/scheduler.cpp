#include "sched/scheduler.h"

#include <algorithm>

#include "cache/kv_cache_budget.h"
#include "cache/slot_mapping.h"
#include "core/check.h"

namespace pagellm {

Status SchedulerConfig::validate() const {
  if (max_num_seqs < 1) return invalid_argument("[scheduler] max_num_seqs must be >= 1, got {}", max_num_seqs);
  if (max_num_batched_tokens < 1) {
    return invalid_argument("[scheduler] max_num_batched_tokens must be >= 1, got {}",
                            max_num_batched_tokens);
  }
  if (block_size < 1) return invalid_argument("[scheduler] block_size must be >= 1, got {}", block_size);
  if (num_blocks < 1) return invalid_argument("[scheduler] num_blocks must be >= 1, got {}", num_blocks);
  if (max_model_len < 1) return invalid_argument("[scheduler] max_model_len must be >= 1, got {}", max_model_len);
  if (long_prefill_token_threshold < 0) {
    return invalid_argument("[scheduler] long_prefill_token_threshold must be >= 0, got {}",
                            long_prefill_token_threshold);
  }
  if (max_num_partial_prefills < 0 || max_long_partial_prefills < 0) {
    return invalid_argument("[scheduler] max_num_partial_prefills and max_long_partial_prefills must be >= 0, got {} and {}",
                            max_num_partial_prefills, max_long_partial_prefills);
  }
  if (max_num_partial_prefills > 0 && max_long_partial_prefills > max_num_partial_prefills) {
    return invalid_argument("[scheduler] max_long_partial_prefills ({}) must not exceed max_num_partial_prefills ({})",
                            max_long_partial_prefills, max_num_partial_prefills);
  }
  if (gdn_chunk_tokens < 0) return invalid_argument("[scheduler] gdn_chunk_tokens must be >= 0, got {}", gdn_chunk_tokens);
  if (gdn_chunk_tokens > 0 && enable_prefix_caching &&
      (num_state_checkpoints < 1 || checkpoint_interval_tokens % gdn_chunk_tokens != 0 ||
       checkpoint_interval_tokens % block_size != 0))
    return invalid_argument("[scheduler] prefix caching of a hybrid model needs GDN state checkpoints on multiples of "
                            "the block size and of the {}-token GDN chunk (got {} checkpoints every {} tokens)",
                            gdn_chunk_tokens, num_state_checkpoints, checkpoint_interval_tokens);
  for (int32_t window : kv_group_windows) {
    if (window != kFullAttention && window < 1)
      return invalid_argument("[scheduler] a KV cache group window must be >= 1 or -1 (full), got {}", window);
  }
  return Status::ok();
}

int SchedulerConfig::max_step_tokens() const {
  return long_prefill_token_threshold > 0 ? std::min(long_prefill_token_threshold, max_num_batched_tokens)
                                          : max_num_batched_tokens;
}

namespace {
KvCacheConfig kv_config_of(const SchedulerConfig& config) {
  const Status status = config.validate();
  CHECK_MSG(status.is_ok(), "{}", status.message());
  return KvCacheConfig{config.num_blocks,
                       config.block_size,
                       config.enable_prefix_caching,
                       config.kv_group_windows,
                       config.enable_prefix_caching ? config.num_state_checkpoints : 0,
                       config.checkpoint_interval_tokens,
                       config.min_recompute_tokens};
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), kv_cache_(kv_config_of(config)) {}

Status Scheduler::add(Request request) {
  const RequestId id = request.id();
  if (requests_.contains(id)) return invalid_argument("[scheduler] request id {} is already live", id);
  if (request.num_prompt_tokens() == 0) return invalid_argument("[scheduler] request {}: prompt is empty", id);
  CHECK_MSG(request.status() == RequestStatus::kWaiting && request.num_output_tokens() == 0,
            "add() takes a fresh request");
  PAGELLM_RETURN_IF_ERROR(request.sampling().validate());
  const int64_t num_prompt_tokens = request.num_prompt_tokens();
  const int64_t max_tokens = request.sampling().max_tokens;
  if (num_prompt_tokens + max_tokens > config_.max_model_len) {
    return invalid_argument("[scheduler] prompt of {} tokens + max_tokens {} exceeds max_model_len {}",
                            num_prompt_tokens, max_tokens, config_.max_model_len);
  }
  // The last sampled token never needs KV; everything before it (or a sliding group's window of it)
  // must fit at once.
  const int64_t num_blocks_needed = max_blocks_per_request(config_.kv_group_windows, num_prompt_tokens + max_tokens - 1,
                                                           config_.block_size, config_.max_step_tokens());
  if (num_blocks_needed > config_.num_blocks) {
    return invalid_argument(
        "[scheduler] prompt of {} tokens + max_tokens {} needs {} KV blocks of {} tokens, but the "
        "whole cache has {}",
        num_prompt_tokens, max_tokens, num_blocks_needed, config_.block_size, config_.num_blocks);
  }
  request.set_arrival_index(next_arrival_index_++);
  auto owned = std::make_unique<Request>(std::move(request));
  waiting_.push_back(owned.get());
  requests_.emplace(id, std::move(owned));
  return Status::ok();
}

Status Scheduler::finish_early(RequestId request_id, FinishReason reason) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return Status(StatusCode::kNotFound,
                  fmt::format("[scheduler] no live request with id {}", request_id));
  }
  finish(it->second.get(), reason);
  return Status::ok();
}

int Scheduler::token_quota(const Request& request, int budget) const {
  int num_tokens = std::min(request.num_missing_tokens(), budget);
  if (config_.long_prefill_token_threshold > 0) {
    num_tokens = std::min(num_tokens, config_.long_prefill_token_threshold);
  }
  return align_to_gdn_chunks(request.num_tokens_computed(), num_tokens, request.num_missing_tokens());
}

int Scheduler::align_to_gdn_chunks(int start, int num_tokens, int num_missing_tokens) const {
  const int chunk = config_.gdn_chunk_tokens;
  // A budget below one chunk could never schedule an aligned piece: such configs stay unaligned.
  if (chunk == 0 || config_.max_step_tokens() < chunk || num_tokens >= num_missing_tokens) return num_tokens;
  return std::max(0, (start + num_tokens) / chunk * chunk - start);
}

int Scheduler::num_cacheable_tokens(const Request& request) const {
  // Decode steps run the GDN recurrence token by token, a prompt the chunked form: only prompt
  // positions are cached, so a hit reproduces a cold prompt's bits.
  return config_.gdn_chunk_tokens > 0 ? request.num_prompt_tokens() : INT32_MAX;
}

std::span<const TokenId> Scheduler::draft_quota(const Request& request, int budget, const DraftProposals* drafts) const {
  if (drafts == nullptr || request.num_missing_tokens() != 1 || request.num_output_placeholders() > 0) return {};
  const auto it = drafts->find(request.id());
  if (it == drafts->end()) return {};
  // The step yields up to 1 + k outputs; the row takes 1 + k of the budget and of the threshold.
  int k = std::min(static_cast<int>(it->second.size()), budget - 1);
  k = std::min(k, request.sampling().max_tokens - request.num_output_tokens() - 1);
  if (config_.long_prefill_token_threshold > 0) k = std::min(k, config_.long_prefill_token_threshold - 1);
  return std::span<const TokenId>(it->second).first(static_cast<size_t>(std::max(k, 0)));
}

StepPlan Scheduler::schedule(const DraftProposals* drafts) {
  CHECK_MSG(uncommitted_steps_.size() <= 1, "schedule() of step {} with steps {} and {} uncommitted", num_steps_,
            uncommitted_steps_.front(), uncommitted_steps_.back());
  StepPlan plan;
  plan.step_index = num_steps_++;
  plan.block_size = config_.block_size;
  plan.finished_request_ids = std::move(finished_since_plan_);
  finished_since_plan_.clear();

  std::vector<Scheduled> scheduled;
  int budget = config_.max_num_batched_tokens;
  schedule_running(scheduled, budget, plan, drafts);
  // A step that had to preempt is short of blocks: admitting now would only preempt again.
  if (plan.preempted_request_ids.empty()) admit_waiting(scheduled, budget);

  plan.rows.reserve(scheduled.size());
  for (const Scheduled& entry : scheduled) {
    plan.rows.push_back(make_row(entry));
    entry.request->schedule_tokens(entry.num_new_tokens, plan.rows.back().is_sampling,
                                   static_cast<int>(entry.drafts.size()));
  }
  if (!plan.empty()) uncommitted_steps_.push_back(plan.step_index);  // an empty plan needs no commit
  return plan;
}

void Scheduler::schedule_running(std::vector<Scheduled>& scheduled, int& budget, StepPlan& plan,
                                 const DraftProposals* drafts) {
  // Decodes first (their latency is what users see), then unfinished prefills; stable = oldest first.
  std::vector<Request*> order = running_;
  std::stable_partition(order.begin(), order.end(),
                        [](const Request* r) { return r->num_missing_tokens() == 1; });
  for (Request* request : order) {
    if (budget == 0) break;
    if (request->status() != RequestStatus::kRunning) continue;  // preempted earlier in this loop
    // Planned ahead of a step that samples its last allowed token: it ends at that commit.
    if (request->num_output_placeholders() > 0 &&
        request->num_planned_tokens() - request->num_prompt_tokens() >= request->sampling().max_tokens)
      continue;
    const std::span<const TokenId> request_drafts = draft_quota(*request, budget, drafts);
    const int num_tokens = token_quota(*request, budget);
    if (num_tokens == 0) continue;  // its next GDN-chunk-aligned piece does not fit the budget left
    const int num_new_tokens = num_tokens + static_cast<int>(request_drafts.size());
    bool fits = false;
    while (!(fits = kv_cache_.allocate(request->id(), request->num_tokens_computed(),
                                       num_new_tokens))) {
      Request* victim = running_.back();
      preempt(victim, scheduled, budget, plan);
      if (victim == request) break;
    }
    if (!fits) continue;
    scheduled.push_back(
        {.request = request, .num_new_tokens = num_new_tokens, .is_new = false, .drafts = request_drafts});
    budget -= num_new_tokens;
  }
}

bool Scheduler::is_long_prompt(const Request& request) const {
  return config_.long_prefill_token_threshold > 0 && request.num_tokens() > config_.long_prefill_token_threshold;
}

void Scheduler::admit_waiting(std::vector<Scheduled>& scheduled, int& budget) {
  // The running requests' prompts this step leaves unfinished, all and long ones (partial-prefill limits).
  const int max_partial = config_.max_num_partial_prefills, max_long = config_.max_long_partial_prefills;
  int num_partial = 0, num_long_partial = 0;
  if (max_partial > 0 || max_long > 0) {
    // Every running request as it stands, then corrected for the inputs this step gives the
    // scheduled ones (all of them running: admission has not started), without a lookup per request.
    auto count = [&](const Request& request, int num_inputs, int sign) {
      if (request.num_tokens_computed() + num_inputs >= request.num_tokens()) return;
      num_partial += sign;
      if (is_long_prompt(request)) num_long_partial += sign;
    };
    for (const Request* request : running_) count(*request, 0, +1);
    for (const Scheduled& entry : scheduled) {
      count(*entry.request, 0, -1);
      count(*entry.request, entry.num_new_tokens - static_cast<int>(entry.drafts.size()), +1);
    }
  }
  size_t next = 0;  // waiting_[next] is considered next; the ones before it were passed over
  while (next < waiting_.size() && budget > 0 && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Request* request = waiting_[next];
    // Preempted while a step samples for it: it resumes with that token, after the step's commit.
    if (request->num_output_placeholders() > 0) break;
    // Long prompts at their limit: shorter ones behind this one may start. (Decided by length, before
    // the prefix lookup: waiting prompts are not hashed again every step.)
    const bool long_prompt = is_long_prompt(*request);
    if (long_prompt && max_long > 0 && num_long_partial >= max_long) {
      ++next;
      continue;
    }
    // prompt_logprobs need the logits of every prompt position: no cached prefix skips them (as vLLM).
    const CachedPrefix prefix =
        request->sampling().num_prompt_logprobs ? CachedPrefix{} : kv_cache_.lookup_prefix(request->token_ids());
    const int num_tokens_computed = prefix.num_cached_tokens;
    const int num_missing_tokens = request->num_tokens() - num_tokens_computed;
    const int num_new_tokens = align_to_gdn_chunks(
        num_tokens_computed,
        std::min({num_missing_tokens, budget,
                  config_.long_prefill_token_threshold > 0 ? config_.long_prefill_token_threshold : budget}),
        num_missing_tokens);
    const bool left_partial = num_new_tokens < num_missing_tokens;
    if (left_partial && max_partial > 0 && num_partial >= max_partial) break;
    if (num_new_tokens == 0 || !kv_cache_.allocate(request->id(), num_tokens_computed, num_new_tokens, &prefix)) {
      break;  // FIFO: a later, smaller request does not overtake this one
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    request->admit(num_tokens_computed);
    running_.push_back(request);
    scheduled.push_back({request, num_new_tokens, /*is_new=*/true, prefix.state_checkpoint});
    budget -= num_new_tokens;
    if (left_partial) {
      ++num_partial;
      if (long_prompt) ++num_long_partial;
    }
  }
}

void Scheduler::preempt(Request* victim, std::vector<Scheduled>& scheduled, int& budget,
                        StepPlan& plan) {
  // A victim already given tokens this step (a decode scheduled before an older prefill) gives
  // them back.
  const auto it = std::find_if(scheduled.begin(), scheduled.end(),
                               [victim](const Scheduled& s) { return s.request == victim; });
  if (it != scheduled.end()) {
    budget += it->num_new_tokens;
    scheduled.erase(it);
  }
  kv_cache_.free(victim->id());
  victim->preempt();
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  waiting_.push_front(victim);
  plan.preempted_request_ids.push_back(victim->id());
  ++num_preemptions_;
}

ScheduledRequest Scheduler::make_row(const Scheduled& entry) {
  const Request& request = *entry.request;
  ScheduledRequest row;
  row.request_id = request.id();
  row.start_pos = request.num_tokens_computed();
  // Known tokens, then the placeholder of a sampling step still running (kPlaceholderToken), then drafts.
  row.num_draft_tokens = static_cast<int>(entry.drafts.size());
  const int num_inputs = entry.num_new_tokens - row.num_draft_tokens;
  const int num_known = std::clamp(request.num_tokens() - row.start_pos, 0, num_inputs);
  const auto tokens = request.token_ids().subspan(row.start_pos, num_known);
  row.token_ids.assign(tokens.begin(), tokens.end());
  row.token_ids.resize(static_cast<size_t>(num_inputs), kPlaceholderToken);
  row.token_ids.insert(row.token_ids.end(), entry.drafts.begin(), entry.drafts.end());
  row.block_tables.resize(static_cast<size_t>(kv_cache_.num_groups()));
  for (int g = 0; g < kv_cache_.num_groups(); ++g) {
    const auto table = kv_cache_.block_table(request.id(), g);
    row.block_tables[static_cast<size_t>(g)].assign(table.begin(), table.end());
    CHECK(static_cast<int>(table.size()) >= num_blocks_for_tokens(row.context_len(), config_.block_size));
  }
  row.is_sampling = row.context_len() - row.num_draft_tokens == request.num_planned_tokens();
  row.is_new = entry.is_new;
  row.restore_state_checkpoint = entry.restore_state_checkpoint;
  if (config_.gdn_chunk_tokens > 0 && row.start_pos % config_.gdn_chunk_tokens == 0)  // checkpoints end GDN chunks
    row.state_checkpoints = kv_cache_.reserve_checkpoints(request.id(), row.start_pos, row.context_len(),
                                                          num_cacheable_tokens(request));
  row.num_prompt_tokens = request.num_prompt_tokens();
  row.num_output_tokens = request.num_planned_tokens() - request.num_prompt_tokens();
  row.sampling = request.sampling_ptr();
  // prompt_logprobs: the prompt token each prompt position of this row predicts, until the first
  // output is known (a request preempted after it does not report them again).
  const int num_prompt_positions = std::min(row.context_len(), request.num_prompt_tokens() - 1) - row.start_pos;
  if (request.sampling().num_prompt_logprobs && request.num_output_tokens() == 0 && num_prompt_positions > 0) {
    const auto targets = request.prompt_token_ids().subspan(static_cast<size_t>(row.start_pos) + 1,
                                                            static_cast<size_t>(num_prompt_positions));
    row.prompt_logprob_targets.assign(targets.begin(), targets.end());
  }
  if (row.is_sampling && request.sampling().needs_token_history()) {
    row.history_token_ids.assign(request.token_ids().begin(), request.token_ids().end());
    row.history_token_ids.resize(static_cast<size_t>(request.num_planned_tokens()), kPlaceholderToken);
  }
  return row;
}

std::vector<RequestUpdate> Scheduler::commit(const StepPlan& plan, const StepResult& result) {
  if (plan.empty()) return {};
  CHECK_MSG(!uncommitted_steps_.empty() && uncommitted_steps_.front() == plan.step_index,
            "commit() of step {} but step {} is the oldest pending", plan.step_index,
            uncommitted_steps_.empty() ? int64_t{-1} : static_cast<int64_t>(uncommitted_steps_.front()));
  uncommitted_steps_.pop_front();
  CHECK_MSG(static_cast<int>(result.sampled.size()) == plan.num_sampled_tokens(),
            "{} sampled tokens for {} sampled positions", result.sampled.size(), plan.num_sampled_tokens());

  std::vector<RequestUpdate> updates;
  size_t sampled_index = 0;
  for (const ScheduledRequest& row : plan.rows) {
    const auto sampled = std::span<const SampledToken>(result.sampled).subspan(sampled_index, row.num_sampled_tokens());
    sampled_index += sampled.size();
    for (const SampledToken& token : sampled)
      CHECK_MSG(token.request_id == row.request_id, "sampled token for request {} in the row of request {}",
                token.request_id, row.request_id);
    const auto it = requests_.find(row.request_id);
    if (it == requests_.end()) continue;  // finished or aborted after schedule(): its result is dropped
    Request* request = it->second.get();
    // Still running: nothing preempted it since this plan (a request preempted while a step of
    // it runs is re-admitted only after that step's commit), so its blocks hold the row's KV.
    // A speculative row's blocks are offered once its drafts are verified (commit_sampled).
    if (request->status() == RequestStatus::kRunning && row.num_draft_tokens == 0) {
      CHECK_MSG(request->num_tokens_computed() >= row.context_len(),
                "request {}: row ends at {} but {} tokens are computed", row.request_id, row.context_len(),
                request->num_tokens_computed());
      kv_cache_.cache_computed_blocks(request->id(), request->token_ids(), row.context_len(),
                                      num_cacheable_tokens(*request));
      kv_cache_.publish_checkpoints(request->id(), row.state_checkpoints);
    }
    if (!sampled.empty()) commit_sampled(request, row, sampled, updates);
  }
  return updates;
}

void Scheduler::commit_sampled(Request* request, const ScheduledRequest& row, std::span<const SampledToken> sampled,
                               std::vector<RequestUpdate>& updates) {
  // Verification: drafts are kept while the target sampled them too; the target's token after
  // the last kept draft ends the row's tokens (sampled[i] is the target's token at draft i).
  const auto drafts = std::span<const TokenId>(row.token_ids).last(static_cast<size_t>(row.num_draft_tokens));
  size_t num_accepted = 0;
  while (num_accepted < drafts.size() && drafts[num_accepted] == sampled[num_accepted].token_id) ++num_accepted;
  std::vector<TokenId> kept;
  for (size_t i = 0; i <= num_accepted; ++i) kept.push_back(sampled[i].token_id);
  const int num_outputs_before = request->num_output_tokens();
  const int num_appended = request->append_outputs(kept);
  if (!drafts.empty()) {
    ++num_spec_drafts_;
    num_spec_draft_tokens_ += static_cast<int64_t>(drafts.size());
    num_spec_accepted_tokens_ += static_cast<int64_t>(num_accepted);
    if (num_spec_accepted_per_position_.size() < drafts.size()) num_spec_accepted_per_position_.resize(drafts.size(), 0);
    for (size_t i = 0; i < num_accepted; ++i) ++num_spec_accepted_per_position_[i];
    if (request->status() == RequestStatus::kRunning) {
      // The kept tokens' KV: full blocks enter the prefix index, blocks past it go back to the pool.
      kv_cache_.cache_computed_blocks(request->id(), request->token_ids(), request->num_tokens_computed(),
                                      num_cacheable_tokens(*request));
      kv_cache_.trim(request->id(), request->num_tokens_computed());
    }
  }
  const std::optional<FinishReason> finish_reason = request->stop_reason();
  for (int i = 0; i < num_appended; ++i) {
    RequestUpdate update;
    update.request_id = request->id();
    update.new_token_id = kept[static_cast<size_t>(i)];
    update.logprobs = sampled[static_cast<size_t>(i)].logprobs;
    if (i + 1 == num_appended) update.finish_reason = finish_reason;
    update.num_prompt_tokens = request->num_prompt_tokens();
    update.num_output_tokens = num_outputs_before + i + 1;
    update.num_prefix_cached_tokens = request->num_prefix_cached_tokens();
    updates.push_back(std::move(update));
  }
  if (finish_reason) finish(request, *finish_reason);
}

void Scheduler::finish(Request* request, FinishReason reason) {
  kv_cache_.free(request->id());
  if (request->status() == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), request));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
  }
  request->finish(reason);
  finished_since_plan_.push_back(request->id());
  requests_.erase(request->id());  // last: `request` dies here
}

const Request* Scheduler::find(RequestId request_id) const {
  const auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats stats;
  stats.num_running = num_running();
  stats.num_waiting = num_waiting();
  stats.num_steps = static_cast<int64_t>(num_steps_);
  stats.num_preemptions = num_preemptions_;
  stats.prefix_cache_query_tokens = kv_cache_.num_prefix_query_tokens();
  stats.prefix_cache_hit_tokens = kv_cache_.num_prefix_hit_tokens();
  stats.num_kv_blocks_used = kv_cache_.num_used_blocks();
  stats.num_kv_blocks_total = kv_cache_.num_blocks();
  stats.num_spec_drafts = num_spec_drafts_;
  stats.num_spec_draft_tokens = num_spec_draft_tokens_;
  stats.num_spec_accepted_tokens = num_spec_accepted_tokens_;
  stats.num_spec_accepted_per_position = num_spec_accepted_per_position_;
  return stats;
}

}  // namespace pagellm
