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
//                each token row (GdnParams::checkpoint_slots), -1 elsewhere; a speculative row of
//                1 + k tokens also keeps its states after tokens 0 .. k-1 in the request's draft slots
//
// Speculative rows (rollback of the recurrent state): the forward leaves a row's state after all of
// its 1 + k tokens in the request's slot; when the scheduler kept only j < k drafts, the request's
// next row starts at start + 1 + j, and bind() copies the draft slot of token j into its slot first.
//
//   row    [ t  d1  d2  d3 ]  start = s      state slot: after d3   draft slots 0, 1, 2: after t, d1, d2
//   kept   t d1 (j = 1)       next row starts at s + 2: its slot gets draft slot 1 (after d1)
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "cache/state_cache.h"
#include "sched/step.h"

namespace pagellm {

class StateSlotBinder {
 public:
  // One slot per running request: max_num_seqs of them (+ the scratch slot).
  // ... and num_checkpoints prefix-cache checkpoints.
  // ... and num_drafts draft slots per request (the most drafts a speculative row carries).
  StateSlotBinder(const MemorySpec& spec, Backend& backend, int max_num_seqs, int num_checkpoints = 0,
                  int num_drafts = 0);

  void bind(const StepPlan& plan);
  // Writes the slots of the last bound plan's rows (and padding up to num_seqs) to slots[num_seqs].
  void write(int32_t* slots, int64_t num_seqs) const;
  // Whether the plan's forward writes states besides the rows' own slots (prefix-cache checkpoints,
  // draft slots): the step then carries checkpoint slots (write_checkpoints).
  static bool writes_checkpoints(const StepPlan& plan);
  // Writes the plan's checkpoint slots per token row to targets[num_tokens] (rows in plan order).
  void write_checkpoints(const StepPlan& plan, int32_t* targets, int64_t num_tokens) const;
  // Frees a request's slot now (its finish reached the engine before the next plan).
  void release(RequestId id);

  // The slots the last bound plan's new rows took, each zeroed or restored (StepBatch::state_slot_inits;
  // speculative roll-backs are not among them: a tensor-parallel target refuses speculation).
  const std::vector<StateSlotInit>& inits() const { return inits_; }
  int num_in_use() const { return cache_.num_in_use(); }
  const StateCache& cache() const { return cache_; }

 private:
  // The speculative row a request ran last: where it started and how many drafts it carried.
  struct SpeculativeRow {
    int start_pos = 0;
    int num_drafts = 0;
  };
  // Rolls the request's slot back to the state after its last speculative row's kept tokens, when
  // `row` starts before that row's end.
  void roll_back(const ScheduledRequest& row, int32_t slot);

  StateCache cache_;
  std::vector<int32_t> row_slots_;  // [plan rows] of the last bound plan
  std::vector<StateSlotInit> inits_;
  std::unordered_map<RequestId, SpeculativeRow> speculative_rows_;
};

}  // namespace pagellm
