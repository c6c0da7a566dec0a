// A fixed pool of worker threads for data-parallel loops (CPU kernels use it over rows/heads).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagellm {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, count) split into contiguous chunks, one per thread; the calling
  // thread takes a chunk too. Returns when all chunks are done. Must not be called from inside fn.
  void parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool used by the CPU backend.
  static ThreadPool& global();

 private:
  void worker_loop(int worker_index);

  std::vector<std::thread> workers_;
  std::mutex caller_mutex_;  // one parallel_for at a time; callers from several threads queue here
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_count_ = 0;
  uint64_t job_generation_ = 0;
  int pending_workers_ = 0;
  bool stopping_ = false;
};

}  // namespace pagellm
