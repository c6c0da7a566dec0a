#include "python/request_batch.h"

#include <chrono>
#include <optional>

#include <fmt/format.h>

namespace pagellm::python {

namespace {
// How long a refused batch waits for the engine to end the requests it had queued (one step).
constexpr double kAbortWaitS = 30.0;
}  // namespace

Expected<std::unique_ptr<RequestBatch>> RequestBatch::submit(Engine& engine, std::vector<GenerateRequest> requests) {
  std::unique_ptr<RequestBatch> batch(new RequestBatch(engine));
  batch->results_.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) batch->results_[i].prompt_token_ids = requests[i].prompt_token_ids;
  std::vector<Expected<std::shared_ptr<OutputChannel>>> submitted = engine.submit_all(std::move(requests));
  std::optional<Status> refused;
  for (size_t i = 0; i < submitted.size(); ++i) {
    if (submitted[i].has_value()) {
      batch->channels_.push_back(*submitted[i]);
      batch->finished_.push_back(false);
    } else if (!refused) {
      refused = submitted.size() == 1 ? submitted[i].status()
                                      : Status(submitted[i].status().code(),
                                               fmt::format("prompt {}: {}", i, submitted[i].status().message()));
    }
  }
  if (refused) {
    batch->abort_unfinished(kAbortWaitS);  // none of the batch runs, and its blocks are free again
    return *refused;
  }
  return batch;
}

RequestBatch::~RequestBatch() { abort_unfinished(); }

void RequestBatch::abort_unfinished(double wait_s) {
  std::vector<size_t> aborted;
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (finished_[i]) continue;
    engine_.abort(channels_[i]->id());
    finished_[i] = true;
    ++num_finished_;
    aborted.push_back(i);
  }
  // The engine ends an aborted request on its next turn and then closes its channel.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (size_t i : aborted) {
    while (!channels_[i]->finished()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      (void)channels_[i]->next_for(static_cast<int>(left.count()));
    }
  }
}

void RequestBatch::take(size_t index, RequestOutput output, std::vector<BatchOutput>& outputs) {
  if (output.finish_reason) {
    finished_[index] = true;
    ++num_finished_;
  }
  results_[index].append(output);
  outputs.push_back(BatchOutput{static_cast<int>(index), std::move(output)});
}

std::vector<BatchOutput> RequestBatch::poll(int wait_ms) {
  std::vector<BatchOutput> outputs;
  const auto drain_ready = [&] {
    for (size_t i = 0; i < channels_.size(); ++i)
      while (!finished_[i]) {
        std::optional<RequestOutput> out = channels_[i]->next_for(0);
        if (!out) break;
        take(i, std::move(*out), outputs);
      }
  };
  drain_ready();
  if (!outputs.empty() || finished()) return outputs;
  // Nothing yet: sleep on the first unfinished request (a step usually serves all of them), then
  // take whatever else that step produced.
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (finished_[i]) continue;
    if (std::optional<RequestOutput> out = channels_[i]->next_for(wait_ms)) {
      take(i, std::move(*out), outputs);
      drain_ready();
    }
    break;
  }
  return outputs;
}

}  // namespace pagellm::python
