// RequestBatch: the engine requests of one Python generate / chat / stream call. Outputs are
// collected by polling with a bound wait, so the calling thread (which released the GIL) comes back
// to Python often enough to see Ctrl-C; destruction or abort_unfinished() aborts what is still
// running (its KV blocks are freed on the engine thread's next turn).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "engine/llm.h"

namespace pagellm::python {

struct BatchOutput {
  int index = 0;          // the request's position in the submitted list
  RequestOutput output;   // what it produced since the last poll
};

class RequestBatch {
 public:
  // Queues all requests in one engine step's inbox, or none: when the engine refuses one, those
  // already queued are aborted and the refusal comes back, naming the request's index.
  static Expected<std::unique_ptr<RequestBatch>> submit(Engine& engine, std::vector<GenerateRequest> requests);
  ~RequestBatch();

  // Waits at most wait_ms for news, then returns every output that arrived (possibly none). Each
  // output is also added to its request's result.
  std::vector<BatchOutput> poll(int wait_ms);
  bool finished() const { return num_finished_ == channels_.size(); }
  // Aborts every request still running; with wait_s > 0 also waits (at most that long) until the
  // engine has ended them, so their KV blocks are free when this returns.
  void abort_unfinished(double wait_s = 0.0);
  const std::vector<CompletedRequest>& results() const { return results_; }

 private:
  explicit RequestBatch(Engine& engine) : engine_(engine) {}
  void take(size_t index, RequestOutput output, std::vector<BatchOutput>& outputs);

  Engine& engine_;
  std::vector<std::shared_ptr<OutputChannel>> channels_;
  std::vector<bool> finished_;
  size_t num_finished_ = 0;
  std::vector<CompletedRequest> results_;
};

}  // namespace pagellm::python
