// StopStringMatcher: finds stop strings in streamed text, across token boundaries.
//
// Text is fed in deltas (e.g. from IncrementalDetokenizer). A stop string and everything after it
// is never returned; text that could still be the beginning of a stop string is held back until
// the next delta shows it is not (or finish() is called).
//
//   stop = "END"   feed("ab E") -> "ab "   (holds "E")   feed("NDx") -> "" and stopped
//
// Each stop string keeps a Knuth-Morris-Pratt state (the length of the longest suffix of the text
// so far that is a prefix of it), so a feed costs O(delta + number of stops), however long the
// stop strings and the held-back text are.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm {

class StopStringMatcher {
 public:
  struct Result {
    std::string text;       // safe to emit now
    bool stopped = false;   // a stop string was found (only in the feed that found it)
    int stop_index = -1;    // which stop string (index into the constructor's list), when stopped
  };

  // Empty stop strings are ignored. With include_stop_string, the matched stop string itself is
  // part of the final text (what vLLM calls include_stop_str_in_output).
  explicit StopStringMatcher(std::vector<std::string> stop_strings, bool include_stop_string = false);

  Result feed(std::string_view delta);
  // Generation ended without a stop: returns the held-back text.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_strings_;  // the non-empty ones
  std::vector<int> stop_indices_;          // their indices in the constructor's list
  std::vector<std::vector<size_t>> failure_;  // KMP failure function of each stop string
  std::vector<size_t> matched_;               // KMP state of each stop string
  bool include_stop_string_;
  bool stopped_ = false;
  std::string pending_;  // held-back text: a suffix that is a prefix of some stop string
};

}  // namespace pagellm
