#include "tokenizer/stop_strings.h"

#include <algorithm>

namespace pagellm {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string)
    : include_stop_string_(include_stop_string) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stop_strings_.push_back(std::move(stop_strings[i]));
    stop_indices_.push_back(static_cast<int>(i));
  }
  // failure[k]: length of the longest proper prefix of stop[0, k] that is also its suffix.
  for (const auto& stop : stop_strings_) {
    std::vector<size_t> failure(stop.size(), 0);
    for (size_t k = 1, len = 0; k < stop.size(); ++k) {
      while (len > 0 && stop[k] != stop[len]) len = failure[len - 1];
      if (stop[k] == stop[len]) ++len;
      failure[k] = len;
    }
    failure_.push_back(std::move(failure));
  }
  matched_.assign(stop_strings_.size(), 0);
}

StopStringMatcher::Result StopStringMatcher::feed(std::string_view delta) {
  Result result;
  if (stopped_) return result;
  const size_t held = pending_.size();
  pending_.append(delta);

  // Earliest occurrence of any stop string; the longest one on a tie. No occurrence lies inside
  // the held-back text (it would have stopped an earlier feed), so only the delta is scanned,
  // continuing each stop string's state.
  size_t best_pos = std::string::npos;
  int best = -1;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const std::string& stop = stop_strings_[i];
    size_t len = matched_[i];
    for (size_t k = held; k < pending_.size(); ++k) {
      while (len > 0 && pending_[k] != stop[len]) len = failure_[i][len - 1];
      if (pending_[k] == stop[len]) ++len;
      if (len == stop.size()) {
        const size_t pos = k + 1 - stop.size();
        if (pos < best_pos || (pos == best_pos && stop.size() > stop_strings_[best].size())) {
          best_pos = pos;
          best = static_cast<int>(i);
        }
        len = failure_[i][len - 1];
        break;
      }
    }
    matched_[i] = len;
  }
  if (best >= 0) {
    result.text = pending_.substr(0, best_pos);
    if (include_stop_string_) result.text += stop_strings_[best];
    result.stopped = true;
    result.stop_index = stop_indices_[static_cast<size_t>(best)];
    stopped_ = true;
    pending_.clear();
    return result;
  }

  // Hold back the longest suffix that is a proper prefix of some stop string.
  const size_t hold = matched_.empty() ? 0 : *std::max_element(matched_.begin(), matched_.end());
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
