// ModelRunner: StepPlan -> packed StepBatch -> one model forward -> sampled tokens (StepResult).
// Owns the paged KV cache tensors of every attention layer; the scheduler owns which blocks are whose.
//
// Per step on a GPU: the inputs are packed into one page-locked host buffer and moved with one
// host-to-device copy (StepLayout in model_runner.cpp); every row is sampled on the device: greedy
// rows by the argmax, rows with temperature > 0 by Backend::sample after it, rows with penalties
// from a penalised f32 copy (Backend::apply_penalties), and logprobs by Backend::logprobs, so only
// ids and (id, logprob) pairs cross back. Decode-only steps replay a graph captured once per (batch
// bucket, block-table width); the sampling ops run after the replay, outside the graph.
// runner/sampler.h's sample_token is the CPU reference those ops are tested against.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/sampling_math.h"
#include "model/model.h"
#include "runner/state_slot_binder.h"
#include "sched/step.h"

namespace pagellm {

class ModelRunner {
 public:
  // Allocates K and V [num_blocks, block_size, num_kv_heads, head_dim] per attention layer, and for a
  // hybrid model the GDN state of num_state_slots running requests (state_slot_binder.h).
  ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size, int num_state_slots = 1);
  ~ModelRunner();

  // One step: launch() packs the inputs, makes the one host-to-device copy and queues the forward and
  // the sampling ops (the CPU backend runs them right here); finish() waits for the device and
  // returns the sampled tokens. Between the two the caller's host work overlaps the device's (the
  // engine publishes the previous step's outputs there). execute() is launch() then finish().
  void launch(const StepPlan& plan);
  StepResult finish(const StepPlan& plan);
  StepResult execute(const StepPlan& plan) {
    launch(plan);
    return finish(plan);
  }

  // The seed a request samples with: its own, or one drawn when it first appears, kept until the
  // plan says it finished (a preempted request keeps its seed, so it resamples the same tokens).
  uint64_t seed_for(const ScheduledRequest& row);

  const CacheViews& caches() const { return caches_; }
  // Hybrid models: frees a finished request's state slot at once; slots in use (0 when idle).
  void release_state(RequestId id) {
    if (state_slots_) state_slots_->release(id);
  }
  int num_state_slots_in_use() const { return state_slots_ ? state_slots_->num_in_use() : 0; }

  // Decode graphs are on by default where the backend has them; PAGELLM_CUDA_GRAPHS=0 turns them off.
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }

 private:
  struct StepLayout;
  // The layout of the step between launch() and finish() (allocated once, reused every step).
  std::unique_ptr<StepLayout> launched_layout_;
  bool launched_ = false;
  // Packs the plan into the host staging buffer with `layout` (rows past the plan are padding).
  void pack(const StepPlan& plan, const StepLayout& layout);
  // Grows the staging, logits and id buffers to fit `layout` (dropping graphs that point at them).
  void reserve(const StepLayout& layout);
  StepBatch device_batch(const StepLayout& layout, int32_t max_seqlen_q, int32_t max_seqlen_k) const;
  // What Backend::sample gets for a sampling row: its knobs and the uniform of draw
  // num_output_tokens of its seed, or temperature 0 for greedy rows (the argmax decides).
  sampling::RowParams device_sample_params(const ScheduledRequest& row);
  // forward + argmax of every logits row into sampled_ids_ (the part a graph records).
  void forward_and_argmax(const StepBatch& batch);
  // After the forward (and outside any graph): draws, penalties and logprobs on the device.
  void sample_after_forward(const StepPlan& plan, const StepLayout& layout);
  // Copies the ids and logprobs to the host (waiting for the step) and builds the result.
  StepResult read_back(const StepPlan& plan, const StepLayout& layout);
  // [rows, row_bytes] u8 at `offset` of the device staging buffer.
  TensorView staged(size_t offset, int64_t rows, int64_t row_bytes) const;

  Model& model_;
  Backend& backend_;
  int block_size_;
  std::vector<Tensor> cache_tensors_;
  CacheViews caches_;
  std::unique_ptr<StateSlotBinder> state_slots_;  // hybrid models only
  std::unordered_map<RequestId, uint64_t> drawn_seeds_;
  uint64_t next_seed_state_;

  // Persistent step buffers (grow-only): staging_host_ and staging_ hold the same StepLayout.
  Tensor staging_host_;  // [bytes] u8, page-locked on a GPU
  Tensor staging_;       // [bytes] u8, on the backend's device (the host buffer itself on the CPU)
  Tensor logits_;        // [rows, vocab], activation dtype
  Tensor sampled_ids_;   // [2 * rows] i32, on the device: R sampling rows, then P penalised rows
  Tensor sampled_ids_host_;  // [2 * rows] i32
  Tensor penalised_logits_;  // [penalised rows, vocab] f32, on the device
  Tensor logprob_ids_, logprob_values_;            // [logprob rows, 1 + kMaxTopLogprobs] i32 / f32
  Tensor logprob_ids_host_, logprob_values_host_;  // the same, on the host
  bool graphs_enabled_ = true;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<OpGraph>> graphs_;  // (batch bucket, table width)
};

}  // namespace pagellm
