// The live progress line on stderr while a benchmark runs:
//   [bench] 412/1000 done (3 failed), 64 in flight, 5234.1 output tok/s
// Redrawn in place ("\r") at most a few times a second; the rate is over the last redraw interval.
#pragma once

#include <cstdint>
#include <cstdio>

#include "bench/http_client.h"

namespace pagellm::bench {

class ProgressLine {
 public:
  ProgressLine(bool enabled, int total_requests, FILE* out = stderr)
      : enabled_(enabled), total_requests_(total_requests), out_(out) {}

  // token_chunks: token-bearing chunks received so far (a live stand-in for output tokens).
  void update(Clock::time_point now, int completed, int failed, int in_flight, int64_t token_chunks);
  // Draws the final state and ends the line.
  void finish(Clock::time_point now, int completed, int failed, int64_t token_chunks);

 private:
  void draw(int completed, int failed, int in_flight, double tokens_per_s);

  bool enabled_;
  int total_requests_;
  FILE* out_;
  bool has_drawn_ = false;
  Clock::time_point last_draw_{};
  int64_t last_token_chunks_ = 0;
};

}  // namespace pagellm::bench
