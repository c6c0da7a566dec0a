// TensorParallelModel: one model split over the ranks of a tensor-parallel group (Megatron style),
// seen by the runner as a single Model. Each rank holds its shard on a backend of its own (q/k/v and
// gate/up split by heads and columns, o and down by rows, the vocabulary head by rows; the embedding
// whole) and reduces its partial outputs through the backend's Communicator. forward() runs the ranks
// in lockstep: rank 0 on the caller's thread, on the engine's backend, writing the logits; every other
// rank on a thread of its own, over its own copy of the KV cache (the same shape as rank 0's, filled
// through the same block tables and slot mappings, so one scheduler and one block pool serve all).
//
// Every rank runs on a thread of this process (make_current() binds it to its device). CPU ranks and
// CUDA ranks sharing one GPU read the step's inputs where rank 0's backend put them; ranks on other
// GPUs copy them over first (NVLink or PCIe peer copies).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "model/model.h"

namespace pagellm {

class RankThreads;

class TensorParallelModel final : public Model {
 public:
  // ranks[0] runs on `rank0` (the engine's backend); backends[r - 1] is rank r's (the ranks' models
  // point at them).
  TensorParallelModel(Backend& rank0, std::vector<std::unique_ptr<Model>> ranks,
                      std::vector<std::unique_ptr<Backend>> backends);
  ~TensorParallelModel() override;

  const ModelConfig& config() const override { return ranks_[0]->config(); }
  // One rank's cache shape; on the CPU every rank's copy takes the same host memory, which the budget counts.
  MemorySpec memory_spec() const override;
  // When every rank's model and collectives are.
  bool is_graph_capturable() const override;
  void forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) override;
  // One graph per rank, each captured on its rank's thread while rank 0 records `record` (one graph
  // fed from several threads at once is not safe to build); replaying them hands the step over in
  // stream order as forward() does.
  std::unique_ptr<OpGraph> capture(Backend& backend, const std::function<void()>& record) override;

 private:
  // Rank r's copy of the caches rank 0 was given (allocated once, on first use; layers sharing a
  // tensor share its copy too).
  const CacheViews& rank_caches(size_t rank, const CacheViews& caches);
  // Rank r's view of the step's inputs: rank 0's when they share its memory, else copies on its device
  // (held in `keep`).
  StepBatch rank_batch(size_t rank, const StepBatch& batch, std::vector<Tensor>& keep);
  bool shares_memory_with_rank0(size_t rank) const;

  Backend& rank0_;
  std::vector<std::unique_ptr<Backend>> backends_;  // ranks 1..N-1 (declared first: the models use them)
  std::vector<std::unique_ptr<Model>> ranks_;
  std::vector<CacheViews> rank_caches_;              // [N - 1]
  std::vector<std::vector<Tensor>> rank_cache_tensors_;
  std::vector<const void*> cached_for_;              // [N - 1]: rank 0's first K tensor each copy mirrors
  bool capturing_ = false;                           // within capture(): forward() records each rank's part
  std::vector<std::unique_ptr<OpGraph>> rank_graphs_;  // [N - 1]: what the last capture recorded
  std::unique_ptr<RankThreads> threads_;
};

}  // namespace pagellm
