#include "model/tensor_parallel_model.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "core/check.h"
#include "model/step_wire.h"

namespace pagellm {

// One thread per rank >= 1 that runs the job it is handed; run() hands every thread the job, runs rank
// 0's part on the caller's thread and returns when all are done.
class RankThreads {
 public:
  explicit RankThreads(int num_ranks) {
    for (int rank = 1; rank < num_ranks; ++rank) threads_.emplace_back([this, rank] { loop(rank); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(const std::function<void(int rank)>& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    wake_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int rank) {
    uint64_t seen = 0;
    while (true) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(rank);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

TensorParallelModel::TensorParallelModel(Backend& rank0, std::vector<std::unique_ptr<Model>> ranks,
                                         std::vector<std::unique_ptr<Backend>> backends)
    : rank0_(rank0), backends_(std::move(backends)), ranks_(std::move(ranks)) {
  CHECK(ranks_.size() >= 2 && backends_.size() + 1 == ranks_.size());
  rank_caches_.resize(backends_.size());
  rank_cache_tensors_.resize(backends_.size());
  cached_for_.assign(backends_.size(), nullptr);
  threads_ = std::make_unique<RankThreads>(static_cast<int>(ranks_.size()));
}

TensorParallelModel::~TensorParallelModel() {
  threads_.reset();  // no rank runs while the models go
}

bool TensorParallelModel::shares_memory_with_rank0(size_t rank) const {
  const Backend& other = *backends_[rank - 1];
  return other.device() == rank0_.device() && other.device_index() == rank0_.device_index();
}

MemorySpec TensorParallelModel::memory_spec() const {
  MemorySpec spec = ranks_[0]->memory_spec();
  bool one_memory = true;  // every rank's cache where rank 0's is (host memory, or one GPU)
  for (size_t r = 1; r < ranks_.size(); ++r) one_memory = one_memory && shares_memory_with_rank0(r);
  if (one_memory) spec.cache_copies = static_cast<int64_t>(ranks_.size());
  return spec;
}

StepBatch TensorParallelModel::rank_batch(size_t rank, const StepBatch& batch, std::vector<Tensor>& keep) {
  if (shares_memory_with_rank0(rank)) return batch;
  return copy_step_inputs(batch, *backends_[rank - 1], keep);
}

bool TensorParallelModel::is_graph_capturable() const {
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Backend& backend = r == 0 ? rank0_ : *backends_[r - 1];
    if (!ranks_[r]->is_graph_capturable() || backend.communicator() == nullptr ||
        !backend.communicator()->is_graph_capturable())
      return false;
  }
  return true;
}

const CacheViews& TensorParallelModel::rank_caches(size_t rank, const CacheViews& caches) {
  const void* first = cache_identity(caches);
  const size_t i = rank - 1;
  if (first != cached_for_[i]) {
    // Each rank's KV heads and GDN state hold its heads only: the shapes of rank 0's (the heads split evenly).
    rank_caches_[i] = allocate_caches(layout_of(caches), *backends_[i], rank_cache_tensors_[i]);
    cached_for_[i] = first;
  }
  return rank_caches_[i];
}

// Rank 0's graph and the other ranks' (each on its rank's stream), replayed as forward() runs a step.
class RankGraphs final : public OpGraph {
 public:
  RankGraphs(Backend& rank0, std::vector<Backend*> others, std::unique_ptr<OpGraph> rank0_graph,
             std::vector<std::unique_ptr<OpGraph>> other_graphs)
      : rank0_(rank0), others_(std::move(others)), rank0_graph_(std::move(rank0_graph)),
        other_graphs_(std::move(other_graphs)) {}

  void replay() override {
    for (size_t i = 0; i < others_.size(); ++i) {
      others_[i]->make_current();
      others_[i]->wait_for_work_of(rank0_);
      other_graphs_[i]->replay();
    }
    rank0_.make_current();
    rank0_graph_->replay();
    for (Backend* other : others_) rank0_.wait_for_work_of(*other);
  }

 private:
  Backend& rank0_;
  std::vector<Backend*> others_;
  std::unique_ptr<OpGraph> rank0_graph_;
  std::vector<std::unique_ptr<OpGraph>> other_graphs_;
};

void TensorParallelModel::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  for (size_t r = 1; r < ranks_.size(); ++r) {  // before the threads start
    backends_[r - 1]->make_current();
    rank_caches(r, caches);
  }
  rank0_.make_current();
  // Rank 0's backend queued the step's inputs on its own stream: the other ranks' work starts after
  // them, and rank 0's next work after all of theirs (stream order, no host wait). While capturing,
  // RankGraphs::replay does this.
  if (!capturing_)
    for (size_t r = 1; r < ranks_.size(); ++r) backends_[r - 1]->wait_for_work_of(rank0_);
  threads_->run([&](int rank) {
    if (rank == 0) {
      ranks_[0]->forward(batch, caches, logits);
      return;
    }
    const size_t r = static_cast<size_t>(rank);
    Backend& backend = *backends_[r - 1];
    backend.make_current();
    auto step = [&] {
      std::vector<Tensor> inputs;  // freed in stream order after the rank's step (inside a capture too)
      const StepBatch mine = rank_batch(r, batch, inputs);
      apply_state_slot_inits(backend, batch.state_slot_inits, rank_caches_[r - 1]);
      ranks_[r]->forward(mine, rank_caches_[r - 1], TensorView());
    };
    if (capturing_) {
      rank_graphs_[r - 1] = backend.capture(step);
    } else {
      step();
    }
  });
  if (!capturing_)
    for (size_t r = 1; r < ranks_.size(); ++r) rank0_.wait_for_work_of(*backends_[r - 1]);
}

std::unique_ptr<OpGraph> TensorParallelModel::capture(Backend& backend, const std::function<void()>& record) {
  CHECK_MSG(&backend == &rank0_, "[model] a tensor-parallel step is captured on rank 0's backend");
  rank_graphs_.clear();
  rank_graphs_.resize(backends_.size());
  capturing_ = true;
  std::unique_ptr<OpGraph> rank0_graph = backend.capture(record);
  capturing_ = false;
  if (rank0_graph == nullptr) return nullptr;
  std::vector<Backend*> others;
  for (size_t i = 0; i < backends_.size(); ++i) {
    CHECK_MSG(rank_graphs_[i] != nullptr, "[model] rank {} recorded no graph while rank 0 captured", i + 1);
    others.push_back(backends_[i].get());
  }
  return std::make_unique<RankGraphs>(rank0_, std::move(others), std::move(rank0_graph), std::move(rank_graphs_));
}

}  // namespace pagellm
