#include "engine/activation_profile.h"

#include <memory>
#include <numeric>

#include "cache/slot_mapping.h"
#include "runner/model_runner.h"

namespace pagellm {

Expected<ActivationProfile> profile_activations(Model& model, Backend& backend, const EngineConfig& config) {
  const int64_t free_before = backend.free_memory_bytes();
  if (free_before <= 0) return invalid_argument("[engine] cannot tell free memory: give --kv-cache-memory BYTES");
  const int num_tokens = config.max_num_batched_tokens;
  const int num_blocks = num_blocks_for_tokens(num_tokens, config.block_size);
  {
    // One sequence of num_tokens prompt tokens that samples: every per-token buffer at its largest.
    PAGELLM_ASSIGN_OR_RETURN(const DType kv_dtype,
                             resolve_kv_cache_dtype(config.kv_cache_dtype, model.memory_spec().kv_dtype));
    ModelRunner runner(model, backend, num_blocks, config.block_size, /*num_state_slots=*/1, kv_dtype);
    runner.set_graphs_enabled(false);
    ScheduledRequest row;
    row.request_id = 1;
    row.token_ids.assign(static_cast<size_t>(num_tokens), 0);
    // Every KV cache group gets the same blocks: the values written do not matter here.
    std::vector<BlockId> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    row.block_tables.assign(static_cast<size_t>(runner.kv_groups().num_groups()), table);
    row.is_sampling = true;
    row.is_new = true;
    row.num_prompt_tokens = num_tokens;
    auto greedy = std::make_shared<SamplingParams>();
    greedy->temperature = 0.0f;
    row.sampling = std::move(greedy);
    StepPlan plan;
    plan.block_size = config.block_size;
    plan.rows.push_back(std::move(row));
    (void)runner.execute(plan);
  }  // the runner's cache and step buffers go; the model's activations and backend scratch stay
  backend.synchronize();  // the runner's buffers are freed in stream order: back in the pool after this
  const int64_t free_after = backend.free_memory_bytes();
  return ActivationProfile{std::max<int64_t>(free_before - free_after, 0), free_after};
}

}  // namespace pagellm
