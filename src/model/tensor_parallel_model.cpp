#include "model/tensor_parallel_model.h"

#include <algorithm>
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
  staged_inputs_.resize(backends_.size());
  own_devices_ = rank0_.device() == Device::kCuda;
  for (size_t r = 1; r < ranks_.size(); ++r) own_devices_ = own_devices_ && !shares_memory_with_rank0(r);
  threads_ = std::make_unique<RankThreads>(static_cast<int>(ranks_.size()));
}

bool TensorParallelModel::is_graph_capturable() const {
  return false;  // the other GPUs' inputs pass through the host (forward_on_own_devices)
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

TensorView TensorParallelModel::stage_input(size_t rank, size_t slot, const TensorView& from) {
  if (from.data == nullptr) return from;
  Backend& backend = *backends_[rank - 1];
  std::vector<Tensor>& buffers = staged_inputs_[rank - 1];
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  Tensor& buffer = buffers[slot];
  if (buffer.nbytes() < from.nbytes()) {
    CHECK_MSG(!backend.is_capturing(), "[tp] rank {}: a step's input outgrew its buffer while a graph was captured",
              rank);
    if (buffer.defined()) retired_inputs_.push_back(buffer);
    buffer = backend.alloc(Shape{static_cast<int64_t>(std::max(from.nbytes(), 2 * buffer.nbytes()))}, DType::kU8);
  }
  const TensorView mine(buffer.view().data, from.shape, from.dtype, backend.device());
  backend.copy(mine, from);
  return mine;
}

StepBatch TensorParallelModel::staged_batch(size_t rank, const StepBatch& batch) {
  StepBatch out = batch;
  size_t slot = 0;
  for (TensorView* v : step_input_views(out)) *v = stage_input(rank, slot++, *v);
  return out;
}

void TensorParallelModel::forward_on_own_devices(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  // Rank 0's inputs reach the other GPUs through host memory (one device-to-host copy, which waits for
  // rank 0's queue): a GPU's direct copy of rank 0's stream-ordered allocations failed on the H100
  // pair this was measured on ("invalid argument"; docs/PERFORMANCE.md), so the steps run eagerly.
  StepBatch on_host = batch;
  host_inputs_.clear();
  for (TensorView* v : step_input_views(on_host)) {
    if (v->data == nullptr) continue;
    Tensor copy = Tensor::cpu(v->shape, v->dtype);
    rank0_.copy(copy.view(), *v);
    host_inputs_.push_back(copy);
    *v = copy.view();
  }
  threads_->run([&](int rank) {
    if (rank == 0) {
      ranks_[0]->forward(batch, caches, logits);
      return;
    }
    const size_t r = static_cast<size_t>(rank);
    Backend& backend = *backends_[r - 1];
    backend.make_current();
    const StepBatch mine = staged_batch(r, on_host);
    apply_state_slot_inits(backend, batch.state_slot_inits, rank_caches_[r - 1]);
    ranks_[r]->forward(mine, rank_caches_[r - 1], TensorView());
  });
}

void TensorParallelModel::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  for (size_t r = 1; r < ranks_.size(); ++r) {  // before the threads start
    backends_[r - 1]->make_current();
    rank_caches(r, caches);
  }
  rank0_.make_current();
  if (own_devices_) return forward_on_own_devices(batch, caches, logits);
  // Rank 0's backend queued the step's inputs on its own stream: the other ranks read them once there.
  rank0_.synchronize();
  threads_->run([&](int rank) {
    if (rank == 0) {
      ranks_[0]->forward(batch, caches, logits);
      return;
    }
    const size_t r = static_cast<size_t>(rank);
    backends_[r - 1]->make_current();
    apply_state_slot_inits(*backends_[r - 1], batch.state_slot_inits, rank_caches_[r - 1]);
    ranks_[r]->forward(batch, rank_caches_[r - 1], TensorView());
    backends_[r - 1]->synchronize();
  });
}

}  // namespace pagellm
