// ModelRunner: StepPlan -> packed StepBatch -> one model forward -> sampled tokens (StepResult).
// Owns the paged KV cache tensors of every attention layer; the scheduler owns which blocks are whose.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "sched/step.h"

namespace pagellm {

class ModelRunner {
 public:
  // Allocates K and V [num_blocks, block_size, num_kv_heads, head_dim] per attention layer.
  ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size);

  StepResult execute(const StepPlan& plan);

  // The seed a request samples with: its own, or one drawn when it first appears, kept until the
  // plan says it finished (a preempted request keeps its seed, so it resamples the same tokens).
  uint64_t seed_for(const ScheduledRequest& row);

  const CacheViews& caches() const { return caches_; }

 private:
  struct HostBatch;
  HostBatch pack(const StepPlan& plan) const;

  Model& model_;
  Backend& backend_;
  int block_size_;
  std::vector<Tensor> cache_tensors_;
  CacheViews caches_;
  std::unordered_map<RequestId, uint64_t> drawn_seeds_;
  uint64_t next_seed_state_;
};

}  // namespace pagellm
