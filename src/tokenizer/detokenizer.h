// IncrementalDetokenizer: turns generated ids into text deltas while streaming.
//
// Guarantees: every delta is valid UTF-8 (bytes of an unfinished character are held back), and
// the deltas of feed() followed by finish() concatenate to exactly tokenizer.decode(all ids).
//
// How: it decodes a small window of recent ids (decode_window, not at the output's start once the
// window has moved) and emits the part of that text that can no longer change: trailing U+FFFD
// (possibly an unfinished character) and trailing byte-fallback tokens are held back. Once the
// window's text is fully emitted, the window restarts at the next id, so each step costs O(1).
//
//   ids:     [ ... emitted, window closed ... | w0 w1 w2 ]   text(w0..w2) = emitted_ + pending
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagellm {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);

  // Adds one id; returns the text that became final (often one token's text, sometimes empty).
  std::string feed(int32_t id);
  // End of stream: everything still held back (e.g. an incomplete character, as U+FFFD).
  std::string finish();

  // Every id fed so far (special ones included).
  const std::vector<int32_t>& ids() const { return all_ids_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_tokens_;
  bool holds_byte_runs_;
  std::vector<int32_t> all_ids_;
  std::vector<int32_t> window_;   // ids not yet fully emitted, after filtering specials
  bool window_at_start_ = true;   // the window begins at the first decoded token
  std::string emitted_;           // text of the window already returned
};

}  // namespace pagellm
