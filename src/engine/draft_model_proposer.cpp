#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "cache/kv_cache_groups.h"
#include "cache/state_cache.h"

namespace pagellm {

Status check_draft_model(const Model& draft, const Model& target, const Tokenizer* draft_tokenizer,
                         const Tokenizer* target_tokenizer) {
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

int64_t draft_state_bytes(const Model& draft, int num_chains, int num_drafts) {
  const MemorySpec spec = draft.memory_spec();
  return spec.is_hybrid() ? state_cache_bytes(spec, num_chains, num_chains * num_drafts) : 0;
}

namespace {
KvCacheConfig draft_cache_config(const Model& model, int num_blocks, int block_size) {
  // No prefix index: the draft cache follows the target's requests, which rarely repeat a draft step.
  return KvCacheConfig{num_blocks, block_size, /*enable_prefix_caching=*/false,
                       kv_cache_groups_of(model.memory_spec()).windows};
}
}  // namespace

int draft_state_chains(const Model& draft, int num_drafts, int64_t budget_bytes, int max_num_seqs) {
  const int64_t scratch = draft_state_bytes(draft, 0, num_drafts);
  const int64_t per_chain = draft_state_bytes(draft, 1, num_drafts) - scratch;
  return static_cast<int>(
      std::clamp<int64_t>((budget_bytes / 4 - scratch) / std::max<int64_t>(per_chain, 1), 1, max_num_seqs));
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<Model> draft, Backend& backend, int num_blocks, int block_size,
                                       int num_drafts, int chains)
    : model_(std::move(draft)),
      num_chains_(model_->memory_spec().is_hybrid() ? std::max(chains, 1) : 0),
      runner_(*model_, backend, num_blocks, block_size, std::max(num_chains_, 1), std::nullopt, num_chains_ * num_drafts),
      kv_cache_(draft_cache_config(*model_, num_blocks, block_size)),
      block_size_(block_size),
      num_drafts_(num_drafts),
      greedy_(greedy_sampling_params()) {
  for (int32_t chain = num_chains_ - 1; chain >= 0; --chain) free_chains_.push_back(chain);
}

DraftModelProposer::~DraftModelProposer() = default;

int DraftModelProposer::keepable(RequestId id, int num_matching) const {
  if (!is_hybrid()) return num_matching;
  const StateChain& chain = chains_.at(id);
  // Keeping n tokens restarts from S_(n - 1 - start), which must have been written.
  if (chain.num_states == 0 || num_matching <= chain.start) return 0;
  return std::min(num_matching, chain.start + chain.num_states);
}

void DraftModelProposer::keep_state(ScheduledRequest& row, int i) const {
  if (!is_hybrid()) return;
  row.state_checkpoints = {PlannedCheckpoint{row.context_len(), chains_.at(row.request_id).chain * num_drafts_ + i}};
}

std::optional<ScheduledRequest> DraftModelProposer::catch_up_row(const Request& request) {
  const RequestId id = request.id();
  if (is_hybrid() && !chains_.contains(id)) {
    if (free_chains_.empty()) return std::nullopt;  // decodes without drafts until a chain is free
    chains_[id] = StateChain{free_chains_.back(), 0, 0};
    free_chains_.pop_back();
  }
  const std::span<const TokenId> tokens = request.token_ids();
  const int num_tokens = static_cast<int>(tokens.size());
  std::vector<TokenId>& cached = cached_tokens_[id];
  // The last token is always computed again: its logits give the first draft.
  const auto mismatch = std::mismatch(cached.begin(), cached.end(), tokens.begin(), tokens.end());
  const int num_kept = keepable(id, std::min(static_cast<int>(mismatch.first - cached.begin()), num_tokens - 1));
  cached.resize(static_cast<size_t>(num_kept));
  if (kv_cache_.has_request(id)) kv_cache_.trim(id, num_kept);
  // This step writes positions [num_kept, num_tokens + num_drafts - 1): the rest and drafts 1 .. k - 1.
  if (!kv_cache_.allocate(id, num_kept, num_tokens - num_kept + num_drafts_ - 1)) {
    forget(id);
    return std::nullopt;
  }
  ScheduledRequest row = greedy_draft_row(kv_cache_, id, {tokens.begin() + num_kept, tokens.end()}, num_kept, greedy_);
  if (is_hybrid()) {
    StateChain& chain = chains_.at(id);
    // The slot starts again: from zeros, or from the state after the kept tokens.
    row.is_new = true;
    row.restore_state_checkpoint = num_kept == 0 ? -1 : chain.chain * num_drafts_ + (num_kept - 1 - chain.start);
    chain.start = num_tokens - 1;
    chain.num_states = 0;
    keep_state(row, 0);
  }
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
      if (is_hybrid()) chains_.at(row.request_id).num_states = i + 1;
      if (i + 1 == num_drafts_) continue;  // the last draft needs no KV
      cached_tokens_[row.request_id].push_back(token);
      next.rows.push_back(greedy_draft_row(kv_cache_, row.request_id, {token}, row.context_len(), greedy_));
      keep_state(next.rows.back(), i + 1);
    }
    plan = std::move(next);
  }
  return drafts;
}

void DraftModelProposer::forget(RequestId id) {
  kv_cache_.free(id);
  cached_tokens_.erase(id);
  if (const auto it = chains_.find(id); it != chains_.end()) {
    free_chains_.push_back(it->second.chain);
    chains_.erase(it);
    runner_.release_state(id);
  }
}

bool DraftModelProposer::is_idle() const {
  return cached_tokens_.empty() && kv_cache_.is_leak_free() && chains_.empty() && runner_.num_state_slots_in_use() == 0;
}

}  // namespace pagellm
