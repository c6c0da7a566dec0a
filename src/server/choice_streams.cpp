#include "server/choice_streams.h"

namespace pagellm::server {

namespace {
// How long one wait on a channel lasts before the client is looked at again. One choice waits
// longer (fewer wake-ups for thousands of idle streams); several poll more often, as only the
// first unfinished one is waited on.
constexpr int kWaitOneChoiceMs = 50;
constexpr int kWaitManyChoicesMs = 5;
constexpr auto kClientCheckInterval = std::chrono::milliseconds(50);
}  // namespace

std::variant<std::unique_ptr<ChoiceStreams>, ApiError> ChoiceStreams::submit(Engine& engine,
                                                                             std::vector<GenerateRequest> requests) {
  std::unique_ptr<ChoiceStreams> streams(new ChoiceStreams(engine));
  for (GenerateRequest& request : requests) {
    Expected<std::shared_ptr<OutputChannel>> channel = engine.submit(std::move(request));
    if (!channel.has_value()) return api_error_from_status(channel.status());  // destructor aborts the rest
    streams->channels_.push_back(std::move(channel).value());
    streams->finished_.push_back(false);
  }
  return streams;
}

ChoiceStreams::~ChoiceStreams() { abort_unfinished(); }

void ChoiceStreams::abort_unfinished() {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (finished_[i]) continue;
    engine_.abort(channels_[i]->id());
    finished_[i] = true;
    ++num_finished_;
  }
}

std::optional<ChoiceOutput> ChoiceStreams::poll_ready() {
  for (size_t k = 0; k < channels_.size(); ++k) {
    const size_t i = (cursor_ + k) % channels_.size();
    if (finished_[i]) continue;
    std::optional<RequestOutput> out = channels_[i]->next_for(0);
    if (!out) continue;
    if (out->finish_reason) {
      finished_[i] = true;
      ++num_finished_;
    }
    cursor_ = i + 1;
    return ChoiceOutput{static_cast<int>(i), std::move(*out)};
  }
  return std::nullopt;
}

bool ChoiceStreams::check_client(ResponseWriter& writer) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_client_check_ < kClientCheckInterval) return !client_gone_;
  last_client_check_ = now;
  if (writer.client_gone()) {
    client_gone_ = true;
    abort_unfinished();
  }
  return !client_gone_;
}

std::optional<ChoiceOutput> ChoiceStreams::next(ResponseWriter& writer) {
  while (num_finished_ < channels_.size()) {
    if (!check_client(writer)) return std::nullopt;
    if (std::optional<ChoiceOutput> ready = poll_ready()) return ready;
    // Nothing ready: sleep on the first unfinished channel (any output wakes it; the others are
    // polled again after a short wait).
    const size_t remaining = channels_.size() - num_finished_;
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (finished_[i]) continue;
      std::optional<RequestOutput> out = channels_[i]->next_for(remaining == 1 ? kWaitOneChoiceMs : kWaitManyChoicesMs);
      if (out) {
        if (out->finish_reason) {
          finished_[i] = true;
          ++num_finished_;
        }
        return ChoiceOutput{static_cast<int>(i), std::move(*out)};
      }
      break;
    }
  }
  return std::nullopt;
}

}  // namespace pagellm::server
