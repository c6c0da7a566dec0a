#include "runner/state_slot_binder.h"

#include <algorithm>

namespace pagellm {

StateSlotBinder::StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs, int num_checkpoints,
                                 int num_drafts)
    : cache_(spec, backend, max_num_seqs, num_checkpoints, num_drafts) {}

void StateSlotBinder::release(RequestId id) {
  cache_.release(id);
  speculative_rows_.erase(id);
}

void StateSlotBinder::bind(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) release(id);
  for (RequestId id : plan.preempted_request_ids) release(id);
  row_slots_.clear();
  inits_.clear();
  for (const ScheduledRequest& row : plan.rows) {
    if (row.is_new) {
      release(row.request_id);  // defensive: a new admission always starts from zero
      row_slots_.push_back(cache_.acquire(row.request_id, row.restore_state_checkpoint));
      const int32_t restore = row.restore_state_checkpoint;
      inits_.push_back({row_slots_.back(), restore >= 0 ? cache_.checkpoint_slot(restore) : -1});
    } else {
      const int32_t slot = cache_.slot_of(row.request_id);
      CHECK_MSG(slot >= 0, "request {} continues at position {} without a state slot", row.request_id, row.start_pos);
      roll_back(row, slot);
      row_slots_.push_back(slot);
    }
    if (row.num_draft_tokens > 0) {
      CHECK_MSG(row.num_draft_tokens <= cache_.num_drafts(), "request {}: {} drafts, state for {}", row.request_id,
                row.num_draft_tokens, cache_.num_drafts());
      speculative_rows_[row.request_id] = {row.start_pos, row.num_draft_tokens};
    }
  }
}

void StateSlotBinder::roll_back(const ScheduledRequest& row, int32_t slot) {
  const auto it = speculative_rows_.find(row.request_id);
  if (it == speculative_rows_.end()) return;
  const SpeculativeRow last = it->second;
  speculative_rows_.erase(it);
  const int num_kept = row.start_pos - last.start_pos;  // the row's first token and num_kept - 1 drafts
  if (num_kept == 1 + last.num_drafts) return;          // every draft kept: the slot holds that state
  CHECK_MSG(num_kept >= 1 && num_kept <= last.num_drafts,
            "request {} continues at {} after a speculative row of 1 + {} tokens from {}", row.request_id,
            row.start_pos, last.num_drafts, last.start_pos);
  cache_.copy_slot(slot, cache_.draft_slot(slot, num_kept - 1));
}

bool StateSlotBinder::writes_checkpoints(const StepPlan& plan) {
  return std::any_of(plan.rows.begin(), plan.rows.end(), [](const ScheduledRequest& row) {
    return !row.state_checkpoints.empty() || row.num_draft_tokens > 0;
  });
}

void StateSlotBinder::write(int32_t* slots, int64_t num_seqs) const {
  CHECK_MSG(static_cast<int64_t>(row_slots_.size()) <= num_seqs, "{} batch rows for {} bound rows", num_seqs,
            row_slots_.size());
  std::copy(row_slots_.begin(), row_slots_.end(), slots);
  std::fill(slots + row_slots_.size(), slots + num_seqs, cache_.scratch_slot());
}

void StateSlotBinder::write_checkpoints(const StepPlan& plan, int32_t* targets, int64_t num_tokens) const {
  std::fill(targets, targets + num_tokens, -1);
  int64_t first = 0;  // the row's first token row
  for (const ScheduledRequest& row : plan.rows) {
    for (const PlannedCheckpoint& planned : row.state_checkpoints) {
      const int64_t t = first + planned.num_tokens - row.start_pos - 1;
      CHECK_MSG(t >= first && t < first + row.num_new_tokens() && t < num_tokens,
                "request {}: a checkpoint at {} tokens outside its row [{}, {})", row.request_id, planned.num_tokens,
                row.start_pos, row.context_len());
      targets[t] = cache_.checkpoint_slot(planned.checkpoint);
    }
    // The drafts are the row's last k tokens (decode rows carry no prefix-cache checkpoint).
    const int64_t row_index = &row - plan.rows.data();
    for (int j = 0; j < row.num_draft_tokens; ++j) {
      const int64_t t = first + row.num_new_tokens() - 1 - row.num_draft_tokens + j;
      targets[t] = cache_.draft_slot(row_slots_[static_cast<size_t>(row_index)], j);
    }
    first += row.num_new_tokens();
  }
}

}  // namespace pagellm
