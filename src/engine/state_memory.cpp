#include "engine/state_memory.h"

#include "cache/state_cache.h"
#include "core/logging.h"

namespace pagellm {

Expected<int64_t> reserve_state_memory(const MemorySpec& spec, EngineConfig& config, int64_t budget) {
  if (!spec.is_hybrid()) return budget;
  if (config.enable_prefix_caching) {
    LOG_INFO("prefix caching is off for hybrid (Gated DeltaNet) models: a cached prefix would also need "
             "the recurrent state at its end");
    config.enable_prefix_caching = false;
  }
  const int64_t per_slot = spec.state_bytes_per_slot();
  const int64_t max_slots = budget / 2 / per_slot - 1;  // one slot is the scratch slot
  if (max_slots < 1)
    return invalid_argument("[engine] the memory budget of {} bytes cannot hold the recurrent state of one request "
                            "({} bytes per slot, at most half the budget); raise --kv-cache-memory",
                            budget, per_slot);
  if (config.max_num_seqs > max_slots) {
    LOG_WARN("max_num_seqs {} -> {}: a request's recurrent state takes {:.2f} MiB and at most half of the "
             "{:.2f} GiB budget goes to state",
             config.max_num_seqs, max_slots, static_cast<double>(per_slot) / (1 << 20),
             static_cast<double>(budget) / (int64_t{1} << 30));
    config.max_num_seqs = static_cast<int>(max_slots);
  }
  const int64_t state_bytes = state_cache_bytes(spec, config.max_num_seqs);
  LOG_INFO("GDN state: {} slots (+1 scratch) of {:.3f} MiB ({} GDN layers: conv {} B + f32 recurrent {} B each) "
           "= {:.3f} GiB",
           config.max_num_seqs, static_cast<double>(per_slot) / (1 << 20), spec.num_gdn_layers,
           spec.conv_state_bytes_per_layer(), spec.recurrent_state_bytes_per_layer(),
           static_cast<double>(state_bytes) / (int64_t{1} << 30));
  return budget - state_bytes;
}

}  // namespace pagellm
