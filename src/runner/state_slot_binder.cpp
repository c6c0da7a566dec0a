#include "runner/state_slot_binder.h"

#include <algorithm>

namespace pagellm {

namespace {
// Rows a step may have: the plan's (at most max_num_seqs) or a graph bucket's (at most 256).
constexpr int64_t kMinSlotRows = 256;
}  // namespace

StateSlotBinder::StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs)
    : backend_(backend), cache_(spec, backend, max_num_seqs) {
  const int64_t capacity = std::max<int64_t>(max_num_seqs, kMinSlotRows);
  slots_host_ = Tensor::cpu({capacity}, DType::kI32);
  slots_device_ = backend.device() == Device::kCpu ? slots_host_ : backend.alloc({capacity}, DType::kI32);
}

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

void StateSlotBinder::upload(int64_t num_seqs) {
  CHECK_MSG(num_seqs <= slots_host_.numel() && static_cast<int64_t>(row_slots_.size()) <= num_seqs,
            "{} batch rows for {} bound rows and a state slot table of {}", num_seqs, row_slots_.size(),
            slots_host_.numel());
  int32_t* slots = slots_host_.ptr<int32_t>();
  std::copy(row_slots_.begin(), row_slots_.end(), slots);
  std::fill(slots + row_slots_.size(), slots + num_seqs, cache_.scratch_slot());
  if (backend_.device() != Device::kCpu && num_seqs > 0)
    backend_.copy(slots_device_.view().slice_rows(0, num_seqs), slots_host_.view().slice_rows(0, num_seqs));
}

TensorView StateSlotBinder::device_slots(int64_t num_seqs) const { return slots_device_.view().slice_rows(0, num_seqs); }

}  // namespace pagellm
