// Runs one `bench serve` load: issues the dataset's requests at their arrival times, at most
// max_concurrency at a time, over one HttpClient on the calling thread, and measures each one.
//
//   arrival time reached ─▶ waiting queue ─▶ (in flight < cap) ─▶ clock starts, POST sent
//
// The request clock starts when the request is sent, after any wait for a concurrency slot
// (vLLM's rule), so TTFT measures the server, not the client's queue.
//
// Dependent requests (multi-turn conversations) come from FollowUps: when a request finishes,
// the runner asks for the one that continues it and queues it ahead of requests not yet started,
// so a conversation under way keeps its concurrency slot as a chatting user would.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "bench/base_url.h"
#include "bench/dataset.h"
#include "bench/metrics.h"
#include "bench/openai_stream.h"
#include "core/status.h"

namespace pagellm::bench {

struct ServeConfig {
  BaseUrl base_url;
  RequestOptions request;  // model, endpoint, ignore_eos
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no cap
  uint64_t seed = 0;
  std::string extra_headers;  // e.g. "Authorization: Bearer KEY\r\n"
  bool show_progress = true;
};

class FollowUps {
 public:
  virtual ~FollowUps() = default;
  // The request that continues `finished` given its record and streamed answer text, or nullopt
  // when its conversation is over (or cannot go on: the record failed).
  virtual std::optional<BenchRequest> next(const BenchRequest& finished, const RequestRecord& record,
                                           const std::string& answer_text) = 0;
  // Follow-ups there will be when every request succeeds (the progress line's total).
  virtual int num_planned() const = 0;
};

struct RunResult {
  std::vector<RequestRecord> records;  // in dataset order, then follow-ups in the order sent
  double duration_s = 0.0;             // first request issued .. last one finished
  int peak_concurrency = 0;            // most requests in flight at once
  int64_t num_sse_events = 0;          // every event received, [DONE] and usage included
  double client_cpu_s = 0.0;           // CPU time of the client thread during the run
};

Expected<RunResult> run_serve_benchmark(const ServeConfig& config,
                                        const std::vector<BenchRequest>& requests,
                                        FollowUps* follow_ups = nullptr);

}  // namespace pagellm::bench
