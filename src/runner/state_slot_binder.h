// StateSlotBinder: the runner's side of the GDN state cache (hybrid models). Each step it turns the
// plan's request ids into state slots:
//
//   bind(plan):  finished and preempted ids give their slot back; each is_new row (admission, or
//                re-admission after preemption) takes a slot, zeroed or restored from its prefix hit's
//                checkpoint (restore_state_checkpoint); other rows keep theirs
//   write(B):    state_slots [B] i32 = the rows' slots, then the scratch slot for the padding rows of
//                a graph bucket (rows >= plan rows), into the runner's staging buffer (it reaches the
//                device with the step's other inputs, at an offset a captured graph reads)
//   write_checkpoints(T): checkpoint_slots [T] i32 = the state slot of the checkpoint planned after
//                each token row (GdnParams::checkpoint_slots), -1 elsewhere
#pragma once

#include <memory>
#include <vector>

#include "cache/state_cache.h"
#include "sched/step.h"

namespace pagellm {

class StateSlotBinder {
 public:
  // One slot per running request: max_num_seqs of them (+ the scratch slot).
  // ... and num_checkpoints prefix-cache checkpoints.
  StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs, int num_checkpoints = 0);

  void bind(const StepPlan& plan);
  // Writes the slots of the last bound plan's rows (and padding up to num_seqs) to slots[num_seqs].
  void write(int32_t* slots, int64_t num_seqs) const;
  // Writes the plan's checkpoint slots per token row to targets[num_tokens] (rows in plan order).
  void write_checkpoints(const StepPlan& plan, int32_t* targets, int64_t num_tokens) const;
  // Frees a request's slot now (its finish reached the engine before the next plan).
  void release(RequestId id) { cache_.release(id); }

  // The slots the last bound plan's new rows took, each zeroed or restored (StepBatch::state_slot_inits).
  const std::vector<StateSlotInit>& inits() const { return inits_; }
  int num_in_use() const { return cache_.num_in_use(); }
  const StateCache& cache() const { return cache_; }

 private:
  StateCache cache_;
  std::vector<int32_t> row_slots_;  // [plan rows] of the last bound plan
  std::vector<StateSlotInit> inits_;
};

}  // namespace pagellm
