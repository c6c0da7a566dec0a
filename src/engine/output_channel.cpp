#include "engine/output_channel.h"

#include <chrono>

namespace pagellm {

void OutputChannel::push(RequestOutput output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    if (output.finish_reason) closed_ = true;
    queue_.push_back(std::move(output));
  }
  ready_.notify_all();
}

std::optional<RequestOutput> OutputChannel::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

std::optional<RequestOutput> OutputChannel::next_for(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  return out;
}

bool OutputChannel::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_ && queue_.empty();
}

}  // namespace pagellm
