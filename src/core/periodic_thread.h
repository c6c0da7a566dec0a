// PeriodicThread: calls `tick` every `interval` on a thread of its own until stop() or destruction,
// which wake it at once and wait for a tick in progress. A tick that returns false ends the thread
// early (its work became pointless, e.g. the peer it talks to is gone).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace pagellm {

class PeriodicThread {
 public:
  PeriodicThread(std::chrono::duration<double> interval, std::function<bool()> tick);
  ~PeriodicThread() { stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  void stop();

 private:
  std::chrono::duration<double> interval_;
  std::function<bool()> tick_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members it reads exist
};

}  // namespace pagellm
