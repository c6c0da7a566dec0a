// ModelRunner: StepPlan -> packed StepBatch -> one model forward -> sampled tokens (StepResult).
// Owns the paged KV cache tensors of every attention layer; the scheduler owns which blocks are whose.
//
// Per step on a GPU: the inputs are packed into one page-locked host buffer and moved with one
// host-to-device copy (StepLayout in model_runner.cpp); every row is sampled on the device: greedy
// rows by the argmax, rows with temperature > 0 by Backend::sample after it, rows with penalties
// from a penalised f32 copy (Backend::apply_penalties), and logprobs by Backend::logprobs, so only
// ids and (id, logprob) pairs cross back. Decode-only steps replay a graph captured per (batch
// bucket, block-table width), at start-up (capture_decode_graphs) or at first use; steps of uniform
// multi-token rows (speculative verification: 1 + k tokens per row) capture theirs at first use on
// models without recurrent state. The sampling ops run after the replay, outside the graph. runner/sampler.h's sample_token is the CPU reference
// those ops are tested against.
//
// Two steps may be launched at once (async scheduling): each has its own host slot (staging and
// read-back buffers), so step N+1 is packed and queued while step N runs. A placeholder token of
// step N+1 (sched/step.h) is the id step N samples for that request: Backend::copy_ids moves it
// from step N's device-side ids into step N+1's inputs before step N+1's forward.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/sampling_math.h"
#include "cache/kv_cache_groups.h"
#include "model/model.h"
#include "runner/state_slot_binder.h"
#include "sched/step.h"

namespace pagellm {

class ModelRunner {
 public:
  // Allocates K and V [num_blocks, block_size, num_kv_heads, head_dim] per tensor slot of the model's
  // KV cache groups (cache/kv_cache_groups.h: one per attention layer when all layers are of one
  // kind), and for a hybrid model the GDN state of num_state_slots running requests and of
  // num_state_checkpoints prefix-cache checkpoints, and num_state_drafts draft states per request
  // for speculative rows (state_slot_binder.h).
  // kv_dtype: the caches' dtype (--kv-cache-dtype: f8_e4m3 for the FP8 KV cache); none = the model's
  // activation dtype (MemorySpec::kv_dtype).
  ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size, int num_state_slots = 1,
              std::optional<DType> kv_dtype = std::nullopt, int num_state_checkpoints = 0, int num_state_drafts = 0);
  ~ModelRunner();

  // One step: launch_forward() packs the inputs, makes the host-to-device copy of all of them but
  // the token masks and queues the forward (the CPU backend runs it right here); launch_sampling()
  // copies the masks over and queues the sampling ops and the copy of their ids to the host;
  // finish() waits for that copy and returns the sampled tokens. Between the two halves the host
  // may commit the step before (async scheduling): a grammar's mask needs the token that step
  // samples, the forward does not. A sampling row marked needs_token_mask samples under its
  // token_mask, filled in between; a marked row left without one gets an all-ones mask (a grammar
  // that waits for the reasoning's end, or has ended). At most two steps are launched and not
  // finished; a step's sampling is launched before the next step's forward (which may read its
  // ids), and finish() takes them in launch order. An empty plan launches nothing (it only drops
  // the state of finished requests) and finishes with no tokens. launch() is both halves at once;
  // execute() is launch() then finish().
  void launch_forward(const StepPlan& plan);
  void launch_sampling(const StepPlan& plan);
  void launch(const StepPlan& plan) {
    launch_forward(plan);
    launch_sampling(plan);
  }
  StepResult finish(const StepPlan& plan);
  StepResult execute(const StepPlan& plan) {
    launch(plan);
    return finish(plan);
  }

  // The seed a request samples with: its own, or one drawn when it first appears, kept until the
  // plan says it finished (a preempted request keeps its seed, so it resamples the same tokens).
  uint64_t seed_for(const ScheduledRequest& row);
  // Seeds the stream drawn seeds come from (engine --seed): the same requests in the same order then
  // sample the same tokens from run to run. Without it the stream starts from the clock.
  void set_seed_stream(uint64_t seed) { next_seed_state_ = seed; }

  const CacheViews& caches() const { return caches_; }
  // The KV cache groups of the model: every plan row carries one block table per group.
  const KvCacheGroups& kv_groups() const { return kv_groups_; }
  // Hybrid models: frees a finished request's state slot at once; slots in use (0 when idle).
  void release_state(RequestId id) {
    if (state_slots_) state_slots_->release(id);
  }
  int num_state_slots_in_use() const { return state_slots_ ? state_slots_->num_in_use() : 0; }

  // Decode graphs are on where the backend has them and its KernelOptions::graphs is set (the default;
  // --enforce-eager or PAGELLM_CUDA_GRAPHS=0 clears it).
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }
  bool graphs_enabled() const { return graphs_enabled_; }
  // Captures the decode graph of every batch bucket up to max_num_seqs and every block-table width
  // up to max_model_len, largest first, so no step pays for a capture; the staging buffer is sized
  // for steps of max_num_batched_tokens first, so such a step does not grow it and drop the graphs.
  // Returns how many it captured (0 without graphs). Call with nothing launched.
  int capture_decode_graphs(int max_num_seqs, int max_num_batched_tokens, int max_model_len);
  // Steps of multi-token rows (speculative verification, draft catch-up) run through a graph so far.
  int64_t num_multi_token_graph_steps() const { return num_multi_token_graph_steps_; }

 private:
  struct StepLayout;
  struct StepSlot;
  struct ForwardShape;
  std::unique_ptr<StepSlot> slots_[2];
  int oldest_launched_ = 0, num_launched_ = 0;  // launched slots: oldest_launched_, then the other
  StepSlot& newest_launched() { return *slots_[(oldest_launched_ + num_launched_ - 1) % 2]; }
  // The layout of a plan's inputs and the attention bounds of its forward (a decode graph's bucket
  // when it replays one).
  ForwardShape forward_shape(const StepPlan& plan) const;
  // Packs the plan into `slot`'s host staging buffer with `layout` (rows past the plan are padding).
  // Placeholders become copy_ids pairs that read the ids of the step in `previous` (may be null).
  void pack(const StepPlan& plan, const StepLayout& layout, StepSlot& slot, const StepSlot* previous);
  // Counts the placeholders of a plan: one per decode row planned ahead, + one per penalised history.
  static int64_t count_placeholders(const StepPlan& plan);
  // Grows the staging, logits and id buffers to fit `layout` (dropping graphs that point at them).
  void reserve(const StepLayout& layout, StepSlot& slot);
  // The staging buffer the device reads `slot`'s inputs from (the host buffer itself on the CPU).
  TensorView device_staging(const StepSlot& slot) const;
  StepBatch device_batch(const StepLayout& layout, const StepSlot& slot, int32_t max_seqlen_q,
                         int32_t max_seqlen_k) const;
  // Writes the plan's token masks into `slot`'s staging (all ones for a marked row without one).
  void pack_masks(const StepPlan& plan, const StepLayout& layout, StepSlot& slot) const;
  // Copies the packed inputs but the masks to the device and patches the placeholders there;
  // upload_masks() copies the rest.
  void upload(const StepLayout& layout, const StepSlot& slot);
  void upload_masks(const StepLayout& layout, const StepSlot& slot);
  // The graph of a bucket of uniform rows (tokens_per_row each): replays it, or runs the step
  // eagerly and captures it.
  void run_graph(const StepLayout& layout, const StepSlot& slot, int32_t tokens_per_row);
  // What Backend::sample gets for a sampling row's position (0, or a speculative row's 0..k): its
  // knobs and the uniform of draw num_output_tokens + position of its seed, or temperature 0 for
  // greedy rows (the argmax decides).
  sampling::RowParams device_sample_params(const ScheduledRequest& row, int position);
  // forward (every logits row: R sampling rows, then prompt_logprobs rows) + argmax of the first
  // num_sampling_rows into sampled_ids_ (the part a graph records).
  void forward_and_argmax(const StepBatch& batch, int64_t num_sampling_rows);
  // After the forward (and outside any graph): draws, penalties and logprobs on the device.
  void sample_after_forward(const StepPlan& plan, const StepLayout& layout, const StepSlot& slot);
  // Queues the copies of the ids and logprobs into the slot's host buffers (waited for by finish()).
  void queue_read_back(const StepLayout& layout, StepSlot& slot);
  // Builds the result from the slot's host buffers, once the step is done.
  StepResult read_back(const StepPlan& plan, const StepSlot& slot) const;
  // The prompt_logprobs of the plan's rows that asked for them, from the slot's copied-back rows.
  std::vector<PromptLogprobs> read_prompt_logprobs(const StepPlan& plan, const StepSlot& slot) const;
  // A view at byte `offset` of the staging buffer the device reads `slot`'s inputs from, and the
  // [rows, row_bytes] u8 form the sampling ops take.
  TensorView staged(const StepSlot& slot, size_t offset, Shape shape, DType dtype) const;
  TensorView staged_rows(const StepSlot& slot, size_t offset, int64_t rows, size_t row_bytes) const;

  Model& model_;
  Backend& backend_;
  int block_size_;
  KvCacheGroups kv_groups_;
  std::vector<Tensor> cache_tensors_;  // K and V of each tensor slot
  CacheViews caches_;
  std::unique_ptr<StateSlotBinder> state_slots_;  // hybrid models only
  std::unordered_map<RequestId, uint64_t> drawn_seeds_;
  uint64_t next_seed_state_;

  // Persistent step buffers (grow-only); each slot has its host side (StepSlot).
  Tensor staging_;       // [bytes] u8 on the GPU: the launched step's inputs (unused on the CPU)
  Tensor logits_;        // [rows, vocab], activation dtype
  Tensor sampled_ids_;   // [2 * rows] i32, on the device: R sampling rows, then P penalised rows
  Tensor penalised_logits_;  // [penalised rows, vocab] f32, on the device
  Tensor logprob_ids_, logprob_values_;            // [logprob rows, 1 + kMaxTopLogprobs] i32 / f32
  bool graphs_enabled_ = true;
  // (batch bucket, tokens per row, sampled positions per row, table width)
  using GraphKey = std::array<int64_t, 4>;
  std::map<GraphKey, std::unique_ptr<OpGraph>> graphs_;
  int64_t num_multi_token_graph_steps_ = 0;
};

}  // namespace pagellm
