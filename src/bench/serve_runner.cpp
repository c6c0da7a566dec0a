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

// Which request goes next: arrivals by schedule, then a FIFO wait for a concurrency slot.
class Dispatcher {
 public:
  Dispatcher(std::vector<double> arrival_offsets_s, int max_concurrency, Clock::time_point bench_start)
      : arrival_offsets_s_(std::move(arrival_offsets_s)), max_concurrency_(max_concurrency),
        bench_start_(bench_start) {}

  // Moves every request whose arrival time has come into the waiting queue.
  void admit_arrivals(Clock::time_point now) {
    while (next_arrival_ < static_cast<int>(arrival_offsets_s_.size()) &&
           seconds_between(bench_start_, now) >= arrival_offsets_s_[next_arrival_]) {
      waiting_.push_back(next_arrival_++);
    }
  }
  // The next request to send now, or -1 (none waiting, or the cap is reached).
  int next_to_send(int num_in_flight) {
    if (waiting_.empty() || (max_concurrency_ > 0 && num_in_flight >= max_concurrency_)) return -1;
    int index = waiting_.front();
    waiting_.pop_front();
    return index;
  }
  // How long the event loop may wait for sockets before the next arrival; -1: no more arrivals.
  int poll_timeout_ms(Clock::time_point now) const {
    if (next_arrival_ >= static_cast<int>(arrival_offsets_s_.size())) return -1;
    auto due = bench_start_ + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(arrival_offsets_s_[next_arrival_]));
    return wait_ms_until(now, due);
  }

 private:
  std::vector<double> arrival_offsets_s_;
  int max_concurrency_;
  Clock::time_point bench_start_;
  int next_arrival_ = 0;
  std::deque<int> waiting_;
};

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
  Dispatcher dispatcher(std::move(arrival_offsets_s), config.max_concurrency, bench_start);
  while (counters.completed + counters.failed < num_requests) {
    Clock::time_point now = Clock::now();
    dispatcher.admit_arrivals(now);
    for (int index; (index = dispatcher.next_to_send(client.num_in_flight())) >= 0;) {
      measurers[index]->start(bench_start, Clock::now());
      client.start_post(path, bodies[index], measurers[index].get());
      result.peak_concurrency = std::max(result.peak_concurrency, client.num_in_flight());
    }
    progress.update(now, counters.completed, counters.failed, client.num_in_flight(), counters.token_chunks);
    int timeout_ms = dispatcher.poll_timeout_ms(now);
    if (client.num_in_flight() == 0 && timeout_ms < 0) break;  // defensive: nothing left to wait for
    if (config.show_progress && (timeout_ms < 0 || timeout_ms > 500)) timeout_ms = 500;
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
