// The periodic stats line (vLLM's format) from two EngineMetrics snapshots.
#include <gtest/gtest.h>

#include "server/stats_logger.h"

namespace pagellm::server {
namespace {

TEST(StatsLine, ThroughputsAndGaugesOverTheInterval) {
  EngineMetrics before, now;
  before.prompt_tokens = 1000;
  before.generation_tokens = 50;
  before.prefix_cache_query_tokens = 100;
  before.prefix_cache_hit_tokens = 20;
  now = before;
  now.prompt_tokens += 5120;
  now.generation_tokens += 1280;
  now.prefix_cache_query_tokens += 400;
  now.prefix_cache_hit_tokens += 100;
  now.num_running = 3;
  now.num_waiting = 1;
  now.kv_blocks_used = 42;
  now.kv_blocks_total = 1000;
  EXPECT_EQ(stats_line(before, now, 10.0),
            "Avg prompt throughput: 512.0 tokens/s, Avg generation throughput: 128.0 tokens/s, Running: 3 reqs, "
            "Waiting: 1 reqs, KV cache usage: 4.2%, Prefix cache hit rate: 25.0%");
}

TEST(StatsLine, AnIdleServerStaysQuiet) {
  EngineMetrics m;
  m.prompt_tokens = 7;
  m.kv_blocks_total = 10;
  EXPECT_EQ(stats_line(m, m, 10.0), "");
  EngineMetrics waiting = m;
  waiting.num_waiting = 2;  // nothing ran, but work waits: worth a line
  EXPECT_NE(stats_line(m, waiting, 10.0), "");
}

}  // namespace
}  // namespace pagellm::server
