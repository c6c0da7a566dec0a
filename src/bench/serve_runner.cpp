#include "bench/serve_runner.h"

#include <time.h>

#include <deque>
#include <memory>
#include <optional>

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
  std::vector<int> finished;  // indices not yet offered to FollowUps
};

// Measures one request from its stream of chunks.
class RequestMeasurer : public StreamHandler {
 public:
  // keep_text: collect the answer's text (only FollowUps needs it).
  RequestMeasurer(int index, RequestRecord* record, RunCounters* counters, bool keep_text)
      : index_(index), record_(record), counters_(counters), keep_text_(keep_text) {}

  const std::string& answer_text() const { return answer_text_; }

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
      if (keep_text_) answer_text_ += chunk.text;
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
    counters_->finished.push_back(index_);
  }

 private:
  int index_;
  RequestRecord* record_;
  RunCounters* counters_;
  bool keep_text_;
  std::string answer_text_;
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
  bool has_waiting() const { return !waiting_.empty(); }
  // A follow-up goes first: its conversation is already under way.
  void queue_next(int index) { waiting_.push_front(index); }
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

// Every request of a run, the dataset's and the follow-ups', with one measurer each; records and
// measurers live in deques so the pointers handed out stay valid as follow-ups are added.
class RequestTable {
 public:
  RequestTable(const std::vector<BenchRequest>& requests, const RequestOptions& options, bool keep_text,
               RunCounters* counters)
      : dataset_(requests), options_(options), keep_text_(keep_text), counters_(counters) {
    // Bodies are built up front so JSON work does not sit between a request's clock and its send.
    for (const BenchRequest& r : requests) add(r, make_request_body(r, options));
  }

  int size() const { return static_cast<int>(bodies_.size()); }
  const BenchRequest& request(int index) const {
    return index < static_cast<int>(dataset_.size()) ? dataset_[index] : follow_ups_[index - dataset_.size()];
  }
  const std::string& body(int index) const { return bodies_[index]; }
  RequestMeasurer* measurer(int index) { return measurers_[index].get(); }
  const RequestRecord& record(int index) const { return records_[index]; }

  // Adds a follow-up; its body is built now, before its clock can start. Returns its index.
  int add_follow_up(BenchRequest request) {
    std::string body = make_request_body(request, options_);
    follow_ups_.push_back(std::move(request));
    add(follow_ups_.back(), std::move(body));
    return size() - 1;
  }

  std::vector<RequestRecord> take_records() {
    return std::vector<RequestRecord>(std::make_move_iterator(records_.begin()),
                                      std::make_move_iterator(records_.end()));
  }

 private:
  void add(const BenchRequest& request, std::string body) {
    RequestRecord& record = records_.emplace_back();
    record.prompt_len = request.prompt_len;
    record.conversation = request.conversation;
    record.turn = request.turn;
    record.input_class = request.input_class;
    bodies_.push_back(std::move(body));
    measurers_.push_back(std::make_unique<RequestMeasurer>(size() - 1, &record, counters_, keep_text_));
  }

  const std::vector<BenchRequest>& dataset_;
  const RequestOptions& options_;
  bool keep_text_;
  RunCounters* counters_;
  std::deque<BenchRequest> follow_ups_;
  std::deque<std::string> bodies_;
  std::deque<RequestRecord> records_;
  std::vector<std::unique_ptr<RequestMeasurer>> measurers_;
};

// Offers each newly finished request to FollowUps and queues what continues it.
void queue_follow_ups(FollowUps* follow_ups, RunCounters& counters, RequestTable& table, Dispatcher& dispatcher) {
  std::vector<int> finished = std::move(counters.finished);
  counters.finished.clear();
  if (follow_ups == nullptr) return;
  for (int index : finished) {
    std::optional<BenchRequest> next =
        follow_ups->next(table.request(index), table.record(index), table.measurer(index)->answer_text());
    if (next) dispatcher.queue_next(table.add_follow_up(std::move(*next)));
  }
}

}  // namespace

Expected<RunResult> run_serve_benchmark(const ServeConfig& config,
                                        const std::vector<BenchRequest>& requests,
                                        FollowUps* follow_ups) {
  const int num_requests = static_cast<int>(requests.size());
  if (num_requests == 0) return invalid_argument("[bench] no requests to send");
  if (config.max_concurrency < 0) return invalid_argument("[bench] --max-concurrency must be ≥ 0");
  PAGELLM_ASSIGN_OR_RETURN(std::vector<double> arrival_offsets_s,
                           make_arrival_offsets(num_requests, config.request_rate,
                                                config.burstiness, config.seed));
  raise_open_file_limit();
  const std::string path = config.base_url.path_for(endpoint_path(config.request.endpoint));
  RunCounters counters;
  RequestTable table(requests, config.request, /*keep_text=*/follow_ups != nullptr, &counters);

  RunResult result;
  HttpClient client(config.base_url, config.extra_headers);
  const int planned_requests = num_requests + (follow_ups != nullptr ? follow_ups->num_planned() : 0);
  ProgressLine progress(config.show_progress, planned_requests);
  const double cpu_start_s = thread_cpu_s();
  const Clock::time_point bench_start = Clock::now();
  Dispatcher dispatcher(std::move(arrival_offsets_s), config.max_concurrency, bench_start);
  while (counters.completed + counters.failed < table.size()) {
    Clock::time_point now = Clock::now();
    dispatcher.admit_arrivals(now);
    for (int index; (index = dispatcher.next_to_send(client.num_in_flight())) >= 0;) {
      table.measurer(index)->start(bench_start, Clock::now());
      client.start_post(path, table.body(index), table.measurer(index));
      result.peak_concurrency = std::max(result.peak_concurrency, client.num_in_flight());
      queue_follow_ups(follow_ups, counters, table, dispatcher);  // start_post may finish at once
    }
    progress.update(now, counters.completed, counters.failed, client.num_in_flight(), counters.token_chunks);
    int timeout_ms = dispatcher.poll_timeout_ms(now);
    if (client.num_in_flight() == 0 && timeout_ms < 0 && !dispatcher.has_waiting()) break;  // defensive
    if (config.show_progress && (timeout_ms < 0 || timeout_ms > 500)) timeout_ms = 500;
    PAGELLM_RETURN_IF_ERROR(client.poll(timeout_ms));
    queue_follow_ups(follow_ups, counters, table, dispatcher);
  }
  const Clock::time_point bench_end = Clock::now();
  result.records = table.take_records();
  result.duration_s = seconds_between(bench_start, bench_end);
  result.client_cpu_s = thread_cpu_s() - cpu_start_s;
  result.num_sse_events = counters.sse_events;
  progress.finish(bench_end, counters.completed, counters.failed, counters.token_chunks);
  return result;
}

}  // namespace pagellm::bench
