#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>

namespace pagellm {

namespace {
// Chunk `index` of `parts` over [0, count).
std::pair<int64_t, int64_t> chunk_range(int64_t count, int parts, int index) {
  const int64_t base = count / parts, extra = count % parts;
  const int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t count, const std::function<void(int64_t, int64_t)>& fn) {
  if (count <= 0) return;
  const int parts = num_threads();
  if (parts == 1 || count == 1) {
    fn(0, count);
    return;
  }
  std::lock_guard<std::mutex> caller_lock(caller_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_count_ = count;
    pending_workers_ = static_cast<int>(workers_.size());
    ++job_generation_;
  }
  work_ready_.notify_all();
  const auto [begin, end] = chunk_range(count, parts, parts - 1);
  if (begin < end) fn(begin, end);
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return pending_workers_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int worker_index) {
  uint64_t seen_generation = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t count;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || job_generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = job_generation_;
      job = job_;
      count = job_count_;
    }
    const auto [begin, end] = chunk_range(count, num_threads(), worker_index);
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_workers_ == 0) work_done_.notify_one();
    }
  }
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("PAGELLM_NUM_THREADS");
    return env ? std::atoi(env) : 0;
  }());
  return pool;
}

}  // namespace pagellm
