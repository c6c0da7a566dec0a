// StatsLogger: every interval, while the engine has work or had some since the last line, one line
// as vLLM's periodic stats ("Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: ...,
// Running: 3 reqs, Waiting: 0 reqs, KV cache usage: 4.2%, Prefix cache hit rate: 0.0%"), from
// EngineMetrics snapshots on a thread of its own.
#pragma once

#include <chrono>
#include <string>

#include "core/periodic_thread.h"
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

 private:
  bool log_line();

  const Engine& engine_;
  EngineMetrics before_;
  std::chrono::steady_clock::time_point last_;
  PeriodicThread thread_;  // last: starts once the members it reads exist
};

}  // namespace pagellm::server
