#include "engine/mtp_proposer.h"

#include <algorithm>

#include "cache/kv_cache_groups.h"

namespace pagellm {

MtpProposer::MtpProposer(std::unique_ptr<MtpModel> head, Backend& backend, int num_blocks, int block_size,
                         int num_drafts)
    : head_(std::move(head)),
      backend_(backend),
      runner_(*head_, backend, num_blocks, block_size),
      // No prefix index: the head's KV past a prefix hit was never computed.
      kv_cache_(KvCacheConfig{num_blocks, block_size, /*enable_prefix_caching=*/false,
                              kv_cache_groups_of(head_->memory_spec()).windows}),
      block_size_(block_size),
      num_drafts_(num_drafts),
      greedy_(greedy_sampling_params()) {
  runner_.set_graphs_enabled(false);
}

MtpProposer::~MtpProposer() = default;

std::optional<ScheduledRequest> MtpProposer::catch_up_row(const ScheduledRequest& target_row, const Request& request,
                                                          int first_token_row, std::vector<int32_t>& hidden_rows) {
  const RequestId id = request.id();
  const int start = target_row.start_pos;
  // Positions the target kept (a speculative row's rejected drafts are not), each paired with the
  // token after it: known, as the request holds a token past every computed position.
  const int end = std::min(target_row.context_len(), request.num_tokens_computed());
  if (end <= start || end >= request.num_tokens()) return std::nullopt;
  const bool drafts = request.num_missing_tokens() == 1 && end == request.num_tokens() - 1;
  auto paired = num_paired_.find(id);
  const int kept = paired == num_paired_.end() ? 0 : std::min(paired->second, start);
  if (kv_cache_.has_request(id)) kv_cache_.trim(id, kept);
  // Positions [kept, start) (a prefix-cache hit) stay unpaired; the drafts' positions follow `end`.
  if (!kv_cache_.allocate(id, kept, end - kept + (drafts ? num_drafts_ - 1 : 0))) {
    forget(id);
    return std::nullopt;
  }
  num_paired_[id] = end;
  const std::span<const TokenId> tokens = request.token_ids();
  ScheduledRequest row = greedy_draft_row(kv_cache_, id, {tokens.begin() + start + 1, tokens.begin() + end + 1},
                                          start, greedy_);
  row.is_sampling = drafts;
  for (int p = start; p < end; ++p) hidden_rows.push_back(first_token_row + p - start);
  return row;
}

StepResult MtpProposer::run(const StepPlan& plan, const TensorView& source, const std::vector<int32_t>& hidden_rows) {
  const auto count = static_cast<int64_t>(hidden_rows.size());
  if (!hidden_rows_.defined() || hidden_rows_.numel() < count)
    hidden_rows_ = backend_.alloc({std::max<int64_t>(count, 2 * hidden_rows_.numel())}, DType::kI32);
  Tensor host = Tensor::cpu({count}, DType::kI32);
  std::copy(hidden_rows.begin(), hidden_rows.end(), host.ptr<int32_t>());
  const TensorView rows = hidden_rows_.view().slice_rows(0, count);
  backend_.copy(rows, host.view());
  head_->set_hidden_input(source, rows);
  return runner_.execute(plan);
}

void MtpProposer::after_step(const StepPlan& target_plan, const RequestLookup& find) {
  ready_.clear();
  StepPlan plan;
  plan.block_size = block_size_;
  std::vector<int32_t> hidden_rows;  // per head token row: the target token row of its hidden state
  int first_token_row = 0;
  for (const ScheduledRequest& target_row : target_plan.rows) {
    const int first = first_token_row;
    first_token_row += target_row.num_new_tokens();
    const Request* request = find(target_row.request_id);
    if (request == nullptr || request->status() != RequestStatus::kRunning) continue;
    if (std::optional<ScheduledRequest> row = catch_up_row(target_row, *request, first, hidden_rows))
      plan.rows.push_back(std::move(*row));
  }
  if (plan.rows.empty()) return;
  TensorView source = head_->target_hidden_states(target_plan.num_scheduled_tokens());
  for (int i = 0; i < num_drafts_ && plan.num_sampling_rows() > 0; ++i) {
    plan.step_index = next_step_index_++;
    const StepResult result = run(plan, source, hidden_rows);
    StepPlan next;
    next.block_size = block_size_;
    std::vector<int32_t> next_hidden_rows;  // the head's own hidden state at each row's last token
    int token_row = 0;
    size_t sampled = 0;
    for (const ScheduledRequest& row : plan.rows) {
      token_row += row.num_new_tokens();
      if (!row.is_sampling) continue;
      const TokenId token = result.sampled.at(sampled++).token_id;
      ready_[row.request_id].push_back(token);
      if (i + 1 == num_drafts_) continue;  // the last draft needs no KV
      next.rows.push_back(greedy_draft_row(kv_cache_, row.request_id, {token}, row.context_len(), greedy_));
      next_hidden_rows.push_back(token_row - 1);
    }
    plan = std::move(next);
    hidden_rows = std::move(next_hidden_rows);
    source = head_->hidden_states();
  }
}

DraftProposals MtpProposer::propose(const std::vector<const Request*>& requests) {
  DraftProposals drafts;
  for (const Request* request : requests) {
    const auto it = ready_.find(request->id());
    if (it != ready_.end()) drafts.emplace(request->id(), std::move(it->second));
  }
  ready_.clear();
  return drafts;
}

void MtpProposer::forget(RequestId id) {
  kv_cache_.free(id);
  num_paired_.erase(id);
  ready_.erase(id);
}

bool MtpProposer::is_idle() const { return num_paired_.empty() && kv_cache_.is_leak_free(); }

}  // namespace pagellm
