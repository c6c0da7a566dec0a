// Hybrid (Gated DeltaNet) models need a recurrent state per running request beside the paged KV
// cache of their full-attention layers. Both come out of one memory budget:
//
//   budget = KV blocks (full-attention layers only) + (max_num_seqs + 1 scratch) state slots
//
// At most half the budget goes to state: when max_num_seqs slots would take more, max_num_seqs is
// lowered (with a warning) rather than leaving too few KV blocks for one long request. With prefix
// caching, half of what is left holds GDN state checkpoints (cache/checkpoint_pool.h: a cached
// prefix needs the state at its end), the other half KV blocks:
//
//   budget = state slots + checkpoints (each one slot's bytes) + KV blocks
//
// Speculative decoding adds k draft states per request (the state after each draft, for rollback):
// a request's state then costs 1 + k slots.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "engine/engine_config.h"
#include "model/step_batch.h"

namespace pagellm {

// Returns the bytes left for KV blocks; for hybrid models adjusts config.max_num_seqs, resolves
// hybrid_checkpoint_interval_blocks and sets num_state_checkpoints (a no-op returning `budget` for others).
// Draft states each request's state slot is given (--speculative-config's k, or 0).
int state_drafts_per_request(const EngineConfig& config);
Expected<int64_t> reserve_state_memory(const MemorySpec& spec, EngineConfig& config, int64_t budget);

}  // namespace pagellm
