// StateSlotBinder's rollback of speculative rows (hybrid models): a row of 1 + k tokens names the
// request's draft slots as the GDN checkpoints after its first k tokens, and the request's next row,
// starting after the kept drafts, first gets the state after the last kept token copied into its slot.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "runner/state_slot_binder.h"

namespace pagellm {
namespace {

MemorySpec one_float_state() {
  MemorySpec spec;
  spec.num_gdn_layers = 1;
  spec.gdn_conv_dim = 1;
  spec.gdn_conv_kernel = 2;
  spec.gdn_num_value_heads = spec.gdn_key_head_dim = spec.gdn_value_head_dim = 1;
  spec.state_dtype = DType::kF32;
  return spec;
}

ScheduledRequest row(RequestId id, int start_pos, int num_tokens, int num_drafts = 0) {
  ScheduledRequest r;
  r.request_id = id;
  r.start_pos = start_pos;
  r.token_ids.assign(static_cast<size_t>(num_tokens), 1);
  r.is_new = start_pos == 0;
  r.is_sampling = true;
  r.num_draft_tokens = num_drafts;
  return r;
}

StepPlan plan_of(ScheduledRequest r) {
  StepPlan plan;
  plan.rows.push_back(std::move(r));
  return plan;
}

TEST(StateSlotBinder, KeptDraftsRollTheSlotBackAndAllKeptLeaveIt) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  StateSlotBinder binder(one_float_state(), **backend, /*max_num_seqs=*/2, /*num_checkpoints=*/0, /*num_drafts=*/3);
  float* recurrent = binder.cache().views()[0].recurrent.ptr<float>();  // one float per slot
  binder.bind(plan_of(row(7, 0, 5)));  // the prompt
  int32_t slot = -1;
  binder.write(&slot, 1);

  // A speculative row t d1 d2 d3 from position 5: draft slots after t, d1, d2; the slot after d3.
  const StepPlan speculative = plan_of(row(7, 5, 4, 3));
  binder.bind(speculative);
  EXPECT_TRUE(StateSlotBinder::writes_checkpoints(speculative));
  int32_t targets[4];
  binder.write_checkpoints(speculative, targets, 4);
  const StateCache& cache = binder.cache();
  EXPECT_EQ(targets[0], cache.draft_slot(slot, 0));
  EXPECT_EQ(targets[1], cache.draft_slot(slot, 1));
  EXPECT_EQ(targets[2], cache.draft_slot(slot, 2));
  EXPECT_EQ(targets[3], -1);
  for (int j = 0; j < 3; ++j) recurrent[cache.draft_slot(slot, j)] = 10.0f + static_cast<float>(j);  // "the forward"
  recurrent[slot] = 13.0f;

  binder.bind(plan_of(row(7, 7, 1)));  // t and d1 kept: the state after d1
  EXPECT_EQ(recurrent[slot], 11.0f);

  binder.bind(plan_of(row(7, 8, 3, 2)));  // again, and every draft kept: the slot stays
  recurrent[slot] = 20.0f;
  binder.bind(plan_of(row(7, 11, 1)));
  EXPECT_EQ(recurrent[slot], 20.0f);

  binder.bind(plan_of(row(7, 12, 2, 1)));  // a draft rejected, then the request preempted: nothing kept
  StepPlan preempted;
  preempted.preempted_request_ids = {7};
  binder.bind(preempted);
  EXPECT_EQ(binder.num_in_use(), 0);
  binder.bind(plan_of(row(7, 0, 14)));  // recomputed from zero
  binder.write(&slot, 1);
  EXPECT_EQ(recurrent[slot], 0.0f);
}

}  // namespace
}  // namespace pagellm
