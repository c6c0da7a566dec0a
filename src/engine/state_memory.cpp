#include "engine/state_memory.h"

#include "cache/state_cache.h"
#include <numeric>

#include "core/logging.h"

namespace pagellm {

namespace {

// Resolves the checkpoint interval and sizes the checkpoints from the budget left after the slots;
// returns what stays for KV blocks.
Expected<int64_t> reserve_checkpoints(const MemorySpec& spec, EngineConfig& config, int64_t left) {
  config.num_state_checkpoints = 0;
  if (!config.enable_prefix_caching) return left;
  int& interval_blocks = config.hybrid_checkpoint_interval_blocks;
  if (interval_blocks < 0 || (interval_blocks > 0 && interval_blocks * config.block_size % kGdnChunkTokens != 0))
    return invalid_argument("[engine] --hybrid-checkpoint-interval-blocks {} x --block-size {} must be a multiple of "
                            "the {}-token GDN chunk", interval_blocks, config.block_size, kGdnChunkTokens);
  if (interval_blocks == 0) interval_blocks = kGdnChunkTokens / std::gcd(config.block_size, kGdnChunkTokens);
  const int64_t per_checkpoint = spec.state_bytes_per_slot();
  const int64_t num_checkpoints = std::min<int64_t>(left / 2 / per_checkpoint, INT32_MAX);
  if (num_checkpoints < 1) {
    LOG_WARN("prefix caching is off: the memory budget holds no GDN state checkpoint ({:.2f} MiB each)",
             static_cast<double>(per_checkpoint) / (1 << 20));
    config.enable_prefix_caching = false;
    return left;
  }
  config.num_state_checkpoints = static_cast<int>(num_checkpoints);
  LOG_INFO("prefix cache: {} GDN state checkpoints (every {} tokens) = {:.3f} GiB", num_checkpoints,
           interval_blocks * config.block_size,
           static_cast<double>(num_checkpoints * per_checkpoint) / (int64_t{1} << 30));
  return left - num_checkpoints * per_checkpoint;
}

}  // namespace

int state_drafts_per_request(const EngineConfig& config) {
  return config.speculative.enabled() ? config.speculative.num_speculative_tokens : 0;
}

Expected<int64_t> reserve_state_memory(const MemorySpec& spec, EngineConfig& config, int64_t budget) {
  if (!spec.is_hybrid()) return budget;
  const int64_t per_slot = spec.state_bytes_per_slot();
  // Speculative decoding keeps a request's state after each draft of its row too (state_slot_binder.h).
  const int num_drafts = state_drafts_per_request(config);
  const int64_t max_slots = (budget / 2 / per_slot - 1) / (1 + num_drafts);  // one slot is the scratch slot
  if (max_slots < 1)
    return invalid_argument("[engine] the memory budget of {} bytes cannot hold the recurrent state of one request "
                            "({} bytes per slot, {} slots per request, at most half the budget); raise "
                            "--kv-cache-memory", budget, per_slot, 1 + num_drafts);
  if (config.max_num_seqs > max_slots) {
    LOG_WARN("max_num_seqs {} -> {}: a request's recurrent state takes {:.2f} MiB and at most half of the "
             "{:.2f} GiB budget goes to state",
             config.max_num_seqs, max_slots, static_cast<double>(per_slot) / (1 << 20),
             static_cast<double>(budget) / (int64_t{1} << 30));
    config.max_num_seqs = static_cast<int>(max_slots);
  }
  const int64_t state_bytes = state_cache_bytes(spec, config.max_num_seqs, 0, num_drafts);
  LOG_INFO("GDN state: {} slots (x{} with draft states, +1 scratch) of {:.3f} MiB ({} GDN layers: conv {} B + f32 "
           "recurrent {} B each) = {:.3f} GiB",
           config.max_num_seqs, 1 + num_drafts, static_cast<double>(per_slot) / (1 << 20), spec.num_gdn_layers,
           spec.conv_state_bytes_per_layer(), spec.recurrent_state_bytes_per_layer(),
           static_cast<double>(state_bytes) / (int64_t{1} << 30));
  return reserve_checkpoints(spec, config, budget - state_bytes);
}

}  // namespace pagellm
