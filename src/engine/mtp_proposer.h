// MtpProposer: speculative drafts from the target checkpoint's MTP head (--speculative-config
// {"method": "mtp", "num_speculative_tokens": k}; model/mtp_model.h has the head's math), with the
// head's own paged KV cache (one attention layer) and runner.
//
// After each target step (after_step, the step committed): one batched forward of the head pairs
// every position p the target computed and kept in that step with the token after it and the
// target's hidden state there, (t_(p+1), h_p), so the head's KV follows the target's sequence; for a
// request that now decodes (one token missing), its last pair (t_(n-1), h_(n-2)) gives draft 1, and
// k - 1 single-token forwards on the head's own hidden states give the rest. propose() hands them out.
//
//   request     [ t0 ... t(n-2) | t(n-1) ]          target computed t0 .. t(n-2), sampled t(n-1)
//   head rows   (t1, h0) ... (t(n-1), h(n-2)) -> d1;  (d1, x(n-2)) at n-1 -> d2; ...
//
// The head's KV past the last pair (the drafts' positions) is trimmed and written again by the next
// catch-up. Positions the target took from its prefix cache were never paired: the head attends over
// empty KV there, which lowers acceptance, not exactness (the target verifies every draft). A
// request that did not run in the last step decodes without drafts until it runs again.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "engine/draft_proposer.h"
#include "model/mtp_model.h"
#include "runner/model_runner.h"

namespace pagellm {

class MtpProposer final : public DraftProposer {
 public:
  // The head's cache: num_blocks blocks of block_size tokens (as many as the target's).
  MtpProposer(std::unique_ptr<MtpModel> head, Backend& backend, int num_blocks, int block_size, int num_drafts);
  ~MtpProposer() override;

  void after_step(const StepPlan& plan, const RequestLookup& find) override;
  DraftProposals propose(const std::vector<const Request*>& requests) override;
  void forget(RequestId id) override;
  bool is_idle() const override;

 private:
  // The head's row pairing the positions `target_row` computed and `request` kept, or none (nothing
  // kept, or no room in the head's cache); appends the target token row of each pair's hidden state.
  std::optional<ScheduledRequest> catch_up_row(const ScheduledRequest& target_row, const Request& request,
                                               int first_token_row, std::vector<int32_t>& hidden_rows);
  // Runs the head over `plan` with hidden input row t = source[hidden_rows[t]].
  StepResult run(const StepPlan& plan, const TensorView& source, const std::vector<int32_t>& hidden_rows);

  std::unique_ptr<MtpModel> head_;
  Backend& backend_;
  ModelRunner runner_;
  KvCacheManager kv_cache_;
  int block_size_;
  int num_drafts_;
  std::shared_ptr<const SamplingParams> greedy_;
  std::unordered_map<RequestId, int> num_paired_;  // positions whose head KV pairs a target hidden state
  DraftProposals ready_;                           // made by the last after_step
  Tensor hidden_rows_;                             // [capacity] i32 on the device
  uint64_t next_step_index_ = 0;
};

}  // namespace pagellm
