// ChoiceStreams: the engine requests behind one API request (one per choice: prompts × n) and
// the merge of their output channels into one sequence, watching the client while it waits.
// When the client hangs up, every unfinished request is aborted at once (its KV blocks are freed
// on the engine thread's next turn); destruction aborts whatever is still running.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/http_connection.h"

namespace pagellm::server {

struct ChoiceOutput {
  int index = 0;  // choice index = position in the submitted list
  RequestOutput output;
};

class ChoiceStreams {
 public:
  // Submits every request; if one is refused, the ones already queued are aborted and the refusal
  // comes back as an ApiError (400 bad params, 429 queue full).
  static std::variant<std::unique_ptr<ChoiceStreams>, ApiError> submit(Engine& engine,
                                                                       std::vector<GenerateRequest> requests);
  ~ChoiceStreams();

  // The next output of any choice; nullopt once every choice finished or the client went away
  // (then client_gone() is true and every request has been aborted).
  std::optional<ChoiceOutput> next(ResponseWriter& writer);
  bool client_gone() const { return client_gone_; }
  void abort_unfinished();

 private:
  explicit ChoiceStreams(Engine& engine) : engine_(engine) {}
  std::optional<ChoiceOutput> poll_ready();
  bool check_client(ResponseWriter& writer);

  Engine& engine_;
  std::vector<std::shared_ptr<OutputChannel>> channels_;
  std::vector<bool> finished_;
  size_t num_finished_ = 0;
  size_t cursor_ = 0;  // round-robin start, so no choice starves the others
  bool client_gone_ = false;
  std::chrono::steady_clock::time_point last_client_check_{};
};

}  // namespace pagellm::server
