#include "runner/state_slot_binder.h"

#include <algorithm>

namespace pagellm {

StateSlotBinder::StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs)
    : cache_(spec, backend, max_num_seqs) {}

void StateSlotBinder::bind(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) cache_.release(id);
  for (RequestId id : plan.preempted_request_ids) cache_.release(id);
  row_slots_.clear();
  for (const ScheduledRequest& row : plan.rows) {
    if (row.is_new) {
      cache_.release(row.request_id);  // defensive: a new admission always starts from zero
      row_slots_.push_back(cache_.acquire(row.request_id));
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

}  // namespace pagellm
