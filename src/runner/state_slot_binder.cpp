#include "runner/state_slot_binder.h"

#include <algorithm>

namespace pagellm {

StateSlotBinder::StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs, int num_checkpoints)
    : cache_(spec, backend, max_num_seqs, num_checkpoints) {}

void StateSlotBinder::bind(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) cache_.release(id);
  for (RequestId id : plan.preempted_request_ids) cache_.release(id);
  row_slots_.clear();
  inits_.clear();
  for (const ScheduledRequest& row : plan.rows) {
    if (row.is_new) {
      cache_.release(row.request_id);  // defensive: a new admission always starts from zero
      row_slots_.push_back(cache_.acquire(row.request_id, row.restore_state_checkpoint));
      const int32_t restore = row.restore_state_checkpoint;
      inits_.push_back({row_slots_.back(), restore >= 0 ? cache_.checkpoint_slot(restore) : -1});
      continue;
    }
    const int32_t slot = cache_.slot_of(row.request_id);
    CHECK_MSG(slot >= 0, "request {} continues at position {} without a state slot", row.request_id, row.start_pos);
    row_slots_.push_back(slot);
  }
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
    first += row.num_new_tokens();
  }
}

}  // namespace pagellm
