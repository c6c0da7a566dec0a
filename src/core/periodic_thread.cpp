#include "core/periodic_thread.h"

namespace pagellm {

PeriodicThread::PeriodicThread(std::chrono::duration<double> interval, std::function<bool()> tick)
    : interval_(interval), tick_(std::move(tick)), thread_([this] {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!wake_.wait_for(lock, interval_, [this] { return stopping_; }))
          if (!tick_()) return;
      }) {}

void PeriodicThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pagellm
