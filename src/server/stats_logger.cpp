#include "server/stats_logger.h"

#include <fmt/format.h>

#include "core/logging.h"
#include "engine/engine.h"

namespace pagellm::server {

std::string stats_line(const EngineMetrics& before, const EngineMetrics& now, double seconds) {
  const uint64_t prompt = now.prompt_tokens - before.prompt_tokens;
  const uint64_t generated = now.generation_tokens - before.generation_tokens;
  if (prompt == 0 && generated == 0 && now.num_running == 0 && now.num_waiting == 0) return "";
  const uint64_t queried = now.prefix_cache_query_tokens - before.prefix_cache_query_tokens;
  const uint64_t hits = now.prefix_cache_hit_tokens - before.prefix_cache_hit_tokens;
  const double kv_usage = now.kv_blocks_total > 0 ? 100.0 * now.kv_blocks_used / now.kv_blocks_total : 0.0;
  return fmt::format(
      "Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: {} reqs, "
      "Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
      static_cast<double>(prompt) / seconds, static_cast<double>(generated) / seconds, now.num_running,
      now.num_waiting, kv_usage, queried > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queried) : 0.0);
}

StatsLogger::StatsLogger(const Engine& engine, std::chrono::milliseconds interval)
    : engine_(engine), before_(engine.metrics()), last_(std::chrono::steady_clock::now()),
      thread_(interval, [this] { return log_line(); }) {}

bool StatsLogger::log_line() {
  const EngineMetrics now = engine_.metrics();
  const auto at = std::chrono::steady_clock::now();
  const std::string line = stats_line(before_, now, std::chrono::duration<double>(at - last_).count());
  if (!line.empty()) LOG_INFO("{}", line);
  before_ = now;
  last_ = at;
  return true;
}

}  // namespace pagellm::server
