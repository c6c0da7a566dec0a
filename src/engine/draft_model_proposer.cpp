#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "cache/kv_cache_groups.h"

namespace pagellm {

Status check_draft_model(const Model& draft, const Model& target, const Tokenizer* draft_tokenizer,
                         const Tokenizer* target_tokenizer) {
  if (draft.memory_spec().is_hybrid())
    return invalid_argument("[speculative-config] the draft model {} is a hybrid (Gated DeltaNet) model, whose "
                            "recurrent state cannot be rolled back past rejected drafts", draft.config().architecture);
  if (draft.config().vocab_size != target.config().vocab_size)
    return invalid_argument("[speculative-config] the draft model's vocab_size {} differs from the target's {}: a "
                            "draft must share the target's tokenizer", draft.config().vocab_size,
                            target.config().vocab_size);
  if (draft_tokenizer && target_tokenizer) {
    if (draft_tokenizer->vocab_size() != target_tokenizer->vocab_size())
      return invalid_argument("[speculative-config] the draft's tokenizer has {} tokens, the target's {}",
                              draft_tokenizer->vocab_size(), target_tokenizer->vocab_size());
    for (int32_t id = 0; id < draft_tokenizer->vocab_size(); ++id)
      if (draft_tokenizer->id_to_token(id) != target_tokenizer->id_to_token(id))
        return invalid_argument("[speculative-config] the draft's tokenizer spells token {} '{}', the target's '{}'", id,
                                draft_tokenizer->id_to_token(id), target_tokenizer->id_to_token(id));
  }
  return Status::ok();
}

namespace {
KvCacheConfig draft_cache_config(const Model& model, int num_blocks, int block_size) {
  // No prefix index: the draft cache follows the target's requests, which rarely repeat a draft step.
  return KvCacheConfig{num_blocks, block_size, /*enable_prefix_caching=*/false,
                       kv_cache_groups_of(model.memory_spec()).windows};
}
}  // namespace

DraftModelProposer::DraftModelProposer(std::unique_ptr<Model> draft, Backend& backend, int num_blocks, int block_size,
                                       int num_drafts)
    : model_(std::move(draft)),
      runner_(*model_, backend, num_blocks, block_size),
      kv_cache_(draft_cache_config(*model_, num_blocks, block_size)),
      block_size_(block_size),
      num_drafts_(num_drafts),
      greedy_(greedy_sampling_params()) {}

DraftModelProposer::~DraftModelProposer() = default;

std::optional<ScheduledRequest> DraftModelProposer::catch_up_row(const Request& request) {
  const std::span<const TokenId> tokens = request.token_ids();
  const int num_tokens = static_cast<int>(tokens.size());
  std::vector<TokenId>& cached = cached_tokens_[request.id()];
  // The last token is always computed again: its logits give the first draft.
  const auto mismatch = std::mismatch(cached.begin(), cached.end(), tokens.begin(), tokens.end());
  const int num_kept = std::min(static_cast<int>(mismatch.first - cached.begin()), num_tokens - 1);
  cached.resize(static_cast<size_t>(num_kept));
  if (kv_cache_.has_request(request.id())) kv_cache_.trim(request.id(), num_kept);
  // This step writes positions [num_kept, num_tokens + num_drafts - 1): the rest and drafts 1 .. k - 1.
  if (!kv_cache_.allocate(request.id(), num_kept, num_tokens - num_kept + num_drafts_ - 1)) {
    forget(request.id());
    return std::nullopt;
  }
  ScheduledRequest row =
      greedy_draft_row(kv_cache_, request.id(), {tokens.begin() + num_kept, tokens.end()}, num_kept, greedy_);
  cached.assign(tokens.begin(), tokens.end());
  return row;
}

DraftProposals DraftModelProposer::propose(const std::vector<const Request*>& requests) {
  StepPlan plan;
  plan.block_size = block_size_;
  for (const Request* request : requests)
    if (std::optional<ScheduledRequest> row = catch_up_row(*request)) plan.rows.push_back(std::move(*row));
  DraftProposals drafts;
  for (int i = 0; i < num_drafts_ && !plan.empty(); ++i) {
    plan.step_index = next_step_index_++;
    const StepResult result = runner_.execute(plan);
    StepPlan next;
    next.block_size = block_size_;
    for (size_t r = 0; r < plan.rows.size(); ++r) {
      const ScheduledRequest& row = plan.rows[r];
      const TokenId token = result.sampled[r].token_id;
      drafts[row.request_id].push_back(token);
      if (i + 1 == num_drafts_) continue;  // the last draft needs no KV
      cached_tokens_[row.request_id].push_back(token);
      next.rows.push_back(greedy_draft_row(kv_cache_, row.request_id, {token}, row.context_len(), greedy_));
    }
    plan = std::move(next);
  }
  return drafts;
}

void DraftModelProposer::forget(RequestId id) {
  kv_cache_.free(id);
  cached_tokens_.erase(id);
}

bool DraftModelProposer::is_idle() const { return cached_tokens_.empty() && kv_cache_.is_leak_free(); }

}  // namespace pagellm
