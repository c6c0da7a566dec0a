#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace pagellm {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string)
    : include_stop_string_(include_stop_string) {
  for (auto& s : stop_strings) {
    if (!s.empty()) stop_strings_.push_back(std::move(s));
  }
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view delta) {
  Result result;
  if (stopped_) return result;
  pending_.append(delta);

  // Earliest occurrence of any stop string; the longest one on a tie.
  size_t best_pos = std::string::npos;
  int best = -1;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = pending_.find(stop_strings_[i]);
    if (pos == std::string::npos) continue;
    if (pos < best_pos || (pos == best_pos && stop_strings_[i].size() > stop_strings_[best].size())) {
      best_pos = pos;
      best = static_cast<int>(i);
    }
  }
  if (best >= 0) {
    result.text = pending_.substr(0, best_pos);
    if (include_stop_string_) result.text += stop_strings_[best];
    result.stopped = true;
    result.stop_index = best;
    stopped_ = true;
    pending_.clear();
    return result;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& stop : stop_strings_) {
    const size_t max_len = std::min(stop.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  result.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopStringMatcher::finish() {
  std::string rest;
  if (!stopped_) rest.swap(pending_);
  return rest;
}

}  // namespace pagellm
