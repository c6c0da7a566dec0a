#include "bench/serve_runner.h"

#include <time.h>

#include <deque>
#include <memory>

#include "bench/arrivals.h"
#include "bench/http_client.h"
#include "bench/progress_line.h"

namespace pagellm::bench {

namespace {

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Live counters shared by all requests of a run.
struct RunCounters {
  int completed = 0;
  int failed = 0;
  int64_t token_chunks = 0;
  int64_t sse_events = 0;
  Clock::time_point last_finish{};
};

// Measures one request from its stream of chunks.
class RequestMeasurer : public StreamHandler {
 public:
  RequestMeasurer(RequestRecord* record, RunCounters* counters) : record_(record), counters_(counters) {}

  void start(Clock::time_point bench_start, Clock::time_point now) {
    start_ = now;
    record_->start_s = seconds_between(bench_start, now);
  }

  void on_sse_event(std::string_view data, Clock::time_point now) override {
    ++counters_->sse_events;
    StreamChunk chunk = parse_stream_chunk(data);
    if (chunk.error && error_.empty()) error_ = *chunk.error;
    if (chunk.has_choices) {
      if (num_token_chunks_ == 0) {
        record_->ttft_s = seconds_between(start_, now);
      } else {
        record_->itl_s.push_back(seconds_between(last_token_time_, now));
      }
      last_token_time_ = now;
      ++num_token_chunks_;
      ++counters_->token_chunks;
    }
    if (chunk.completion_tokens) usage_completion_tokens_ = *chunk.completion_tokens;
  }

  void on_finished(const Status& status, Clock::time_point now) override {
    if (!status.is_ok()) {
      record_->error = status.message();
    } else if (!error_.empty()) {
      record_->error = error_;
    } else if (num_token_chunks_ == 0) {
      record_->error = "[bench] the stream ended without a chunk that has choices";
    }
    record_->success = record_->error.empty();
    if (record_->success) {
      record_->e2el_s = seconds_between(start_, last_token_time_);
      record_->output_tokens_from_usage = usage_completion_tokens_ >= 0;
      record_->output_tokens =
          record_->output_tokens_from_usage ? usage_completion_tokens_ : num_token_chunks_;
      ++counters_->completed;
    } else {
      ++counters_->failed;
    }
    counters_->last_finish = now;
  }

 private:
  RequestRecord* record_;
  RunCounters* counters_;
  Clock::time_point start_{};
  Clock::time_point last_token_time_{};
  int64_t num_token_chunks_ = 0;
  int64_t usage_completion_tokens_ = -1;
  std::string error_;
};

// Milliseconds epoll may sleep before the next arrival is due (rounded up: never wake early
// and spin), or -1 when nothing is scheduled.
int wait_ms_until(Clock::time_point now, Clock::time_point due) {
  if (due <= now) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(due - now).count();
  return static_cast<int>(std::min<int64_t>(ms, 1000));
}

}  // namespace

Expected<RunResult> run_serve_benchmark(const ServeConfig& config,
                                        const std::vector<BenchRequest>& requests) {
  const int num_requests = static_cast<int>(requests.size());
  if (num_requests == 0) return invalid_argument("[bench] no requests to send");
  if (config.max_concurrency < 0) return invalid_argument("[bench] --max-concurrency must be ≥ 0");
  PAGELLM_ASSIGN_OR_RETURN(std::vector<double> arrival_offsets_s,
                           make_arrival_offsets(num_requests, config.request_rate,
                                                config.burstiness, config.seed));
  raise_open_file_limit();
  const std::string path = config.base_url.path_for(endpoint_path(config.request.endpoint));
  // Bodies are built up front so JSON work does not sit between a request's clock and its send.
  std::vector<std::string> bodies;
  bodies.reserve(requests.size());
  for (const BenchRequest& r : requests) bodies.push_back(make_request_body(r, config.request));

  RunResult result;
  result.records.resize(num_requests);
  RunCounters counters;
  std::vector<std::unique_ptr<RequestMeasurer>> measurers;
  for (int i = 0; i < num_requests; ++i) {
    result.records[i].prompt_len = requests[i].prompt_len;
    measurers.push_back(std::make_unique<RequestMeasurer>(&result.records[i], &counters));
  }

  HttpClient client(config.base_url, config.extra_headers);
  ProgressLine progress(config.show_progress, num_requests);
  const double cpu_start_s = thread_cpu_s();
  const Clock::time_point bench_start = Clock::now();
  int next_arrival = 0;
  std::deque<int> waiting;  // arrived, waiting for a concurrency slot
  while (counters.completed + counters.failed < num_requests) {
    Clock::time_point now = Clock::now();
    while (next_arrival < num_requests &&
           seconds_between(bench_start, now) >= arrival_offsets_s[next_arrival]) {
      waiting.push_back(next_arrival++);
    }
    while (!waiting.empty() &&
           (config.max_concurrency == 0 || client.num_in_flight() < config.max_concurrency)) {
      int index = waiting.front();
      waiting.pop_front();
      measurers[index]->start(bench_start, Clock::now());
      client.start_post(path, bodies[index], measurers[index].get());
      result.peak_concurrency = std::max(result.peak_concurrency, client.num_in_flight());
    }
    progress.update(now, counters.completed, counters.failed, client.num_in_flight(),
                    counters.token_chunks);
    int timeout_ms = -1;
    if (next_arrival < num_requests) {
      auto due = bench_start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(arrival_offsets_s[next_arrival]));
      timeout_ms = wait_ms_until(now, due);
    }
    if (config.show_progress && (timeout_ms < 0 || timeout_ms > 500)) timeout_ms = 500;
    if (client.num_in_flight() == 0 && timeout_ms < 0) break;  // nothing can ever finish
    PAGELLM_RETURN_IF_ERROR(client.poll(timeout_ms));
  }
  const Clock::time_point bench_end = Clock::now();
  result.duration_s = seconds_between(bench_start, bench_end);
  result.client_cpu_s = thread_cpu_s() - cpu_start_s;
  result.num_sse_events = counters.sse_events;
  progress.finish(bench_end, counters.completed, counters.failed, counters.token_chunks);
  return result;
}

}  // namespace pagellm::bench
