#include "model/tensor_parallel_model.h"

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "core/check.h"

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

TensorParallelModel::TensorParallelModel(std::vector<std::unique_ptr<Model>> ranks,
                                         std::vector<std::unique_ptr<Backend>> backends)
    : backends_(std::move(backends)), ranks_(std::move(ranks)) {
  CHECK(ranks_.size() >= 2 && backends_.size() + 1 == ranks_.size());
  threads_ = std::make_unique<RankThreads>(static_cast<int>(ranks_.size()));
}

TensorParallelModel::~TensorParallelModel() {
  threads_.reset();  // no rank runs while the models go
}

MemorySpec TensorParallelModel::memory_spec() const {
  MemorySpec spec = ranks_[0]->memory_spec();
  bool shared_memory = true;  // every rank's cache in host memory
  for (const auto& backend : backends_) shared_memory = shared_memory && backend->device() == Device::kCpu;
  if (shared_memory) spec.cache_copies = static_cast<int64_t>(ranks_.size());
  return spec;
}

const CacheViews& TensorParallelModel::rank_caches(size_t rank, const CacheViews& caches) {
  const void* first = caches.attention_layers.empty() ? nullptr : caches.attention_layers[0].k.data;
  if (first != cached_for_ || rank_caches_.empty()) {
    CHECK_MSG(caches.gdn_layers.empty(), "tensor parallelism has no Gated DeltaNet state shards");
    rank_caches_.assign(backends_.size(), {});
    rank_cache_tensors_.assign(backends_.size(), {});
    for (size_t r = 0; r < backends_.size(); ++r) {
      std::map<const void*, TensorView> copies;  // rank 0's tensor -> rank r's copy
      auto copy_of = [&](const TensorView& t) {
        auto it = copies.find(t.data);
        if (it != copies.end()) return it->second;
        Tensor mine = backends_[r]->alloc(t.shape, t.dtype);
        rank_cache_tensors_[r].push_back(mine);
        return copies[t.data] = mine.view();
      };
      for (const KvCacheView& layer : caches.attention_layers)
        rank_caches_[r].attention_layers.push_back({copy_of(layer.k), copy_of(layer.v), layer.group});
    }
    cached_for_ = first;
  }
  return rank_caches_[rank - 1];
}

void TensorParallelModel::forward(const StepBatch& batch, const CacheViews& caches, TensorView logits) {
  for (size_t r = 1; r < ranks_.size(); ++r) rank_caches(r, caches);  // before the threads start
  // The ranks read the step's inputs where rank 0's backend put them: host memory, which every CPU
  // rank sees.
  threads_->run([&](int rank) {
    if (rank == 0) ranks_[0]->forward(batch, caches, logits);
    else ranks_[static_cast<size_t>(rank)]->forward(batch, rank_caches_[static_cast<size_t>(rank) - 1], TensorView());
  });
}

}  // namespace pagellm
