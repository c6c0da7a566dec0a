// What rank 0 of a tensor-parallel group of processes sends the other ranks each step (model/
// tensor_parallel_driver.h): the step's inputs (a StepBatch's tensors, copied to the host) and, when
// the runner's caches are new, their layout, which each rank allocates a copy of (its heads' shapes
// are rank 0's: the heads split evenly). Byte layout: little-endian fields in the order written.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/step_batch.h"

namespace pagellm {

// The shapes of a CacheViews and which layers share a tensor (KV cache groups may).
struct CacheLayout {
  struct TensorSpec {
    Shape shape;
    DType dtype = DType::kF32;
  };
  struct AttentionLayer {
    int32_t k = 0, v = 0, group = 0;  // indices into tensors
  };
  struct GdnLayer {
    int32_t conv = 0, recurrent = 0;
  };
  std::vector<TensorSpec> tensors;
  std::vector<AttentionLayer> attention_layers;
  std::vector<GdnLayer> gdn_layers;
};

CacheLayout layout_of(const CacheViews& caches);
// What tells one allocation of the runner's caches from the next (its first tensor).
const void* cache_identity(const CacheViews& caches);
// A cache of `layout` on `backend` (`keep` owns its tensors).
CacheViews allocate_caches(const CacheLayout& layout, Backend& backend, std::vector<Tensor>& keep);

// Repeats on a rank's own GDN state (`caches`) what the runner's StateCache did to rank 0's this step.
void apply_state_slot_inits(Backend& backend, const std::vector<StateSlotInit>& inits, const CacheViews& caches);

// The message of one step: the batch (its tensors read through `backend`, the one they live on) and
// the cache layout when `layout` is given.
// `batch` with its input tensors (token ids ... the extra KV groups' slot mappings) copied onto
// `backend`'s device, the copies held in `keep` (cleared first): for a rank whose inputs live in
// another memory (host memory after a step message, or another GPU).
StepBatch copy_step_inputs(const StepBatch& batch, Backend& backend, std::vector<Tensor>& keep);

std::vector<uint8_t> encode_step(const StepBatch& batch, Backend& backend, const CacheLayout* layout);

struct DecodedStep {
  StepBatch batch;             // views into `inputs`, host tensors
  std::vector<Tensor> inputs;
  bool has_layout = false;
  CacheLayout layout;
};
// An error when the bytes are not a step message of this version.
Expected<DecodedStep> decode_step(const std::vector<uint8_t>& bytes);

}  // namespace pagellm
