#include "bench/progress_line.h"

namespace pagellm::bench {

namespace {
constexpr auto kRedrawInterval = std::chrono::milliseconds(500);
}

void ProgressLine::update(Clock::time_point now, int completed, int failed, int in_flight,
                          int64_t token_chunks) {
  if (!enabled_) return;
  if (!has_drawn_) {
    has_drawn_ = true;
    last_draw_ = now;
    last_token_chunks_ = token_chunks;
    draw(completed, failed, in_flight, 0.0);
    return;
  }
  if (now - last_draw_ < kRedrawInterval) return;
  double interval_s = std::chrono::duration<double>(now - last_draw_).count();
  double tokens_per_s = static_cast<double>(token_chunks - last_token_chunks_) / interval_s;
  last_draw_ = now;
  last_token_chunks_ = token_chunks;
  draw(completed, failed, in_flight, tokens_per_s);
}

void ProgressLine::finish(Clock::time_point now, int completed, int failed, int64_t token_chunks) {
  if (!enabled_) return;
  double interval_s = std::chrono::duration<double>(now - last_draw_).count();
  double tokens_per_s =
      interval_s > 0 ? static_cast<double>(token_chunks - last_token_chunks_) / interval_s : 0.0;
  draw(completed, failed, 0, tokens_per_s);
  std::fputc('\n', out_);
  std::fflush(out_);
}

void ProgressLine::draw(int completed, int failed, int in_flight, double tokens_per_s) {
  std::fprintf(out_, "\r[bench] %d/%d done (%d failed), %d in flight, %.1f output tok/s   ",
               completed + failed, total_requests_, failed, in_flight, tokens_per_s);
  std::fflush(out_);
}

}  // namespace pagellm::bench
