// StatsLogger: every interval, while the engine has work or had some since the last line, one line
// as vLLM's periodic stats ("Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: ...,
// Running: 3 reqs, Waiting: 0 reqs, KV cache usage: 4.2%, Prefix cache hit rate: 0.0%"), from
// EngineMetrics snapshots on a thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine_metrics.h"

namespace pagellm {
class Engine;
}

namespace pagellm::server {

// The line for the change between two snapshots taken `seconds` apart; "" when nothing ran and
// nothing waits (an idle server stays quiet).
std::string stats_line(const EngineMetrics& before, const EngineMetrics& now, double seconds);

class StatsLogger {
 public:
  StatsLogger(const Engine& engine, std::chrono::milliseconds interval);
  ~StatsLogger();  // stops the thread

 private:
  void loop();

  const Engine& engine_;
  std::chrono::milliseconds interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace pagellm::server
