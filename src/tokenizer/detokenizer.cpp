#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace pagellm {

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                               bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)),
      skip_special_tokens_(skip_special_tokens),
      holds_byte_runs_(tokenizer_->decoder_has_byte_fallback()) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
  all_ids_.push_back(id);
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
  // Unknown ids decode to nothing; in the window they would cut a run of byte tokens that
  // decode() sees as one.
  if (!tokenizer_->has_token(id)) return {};
  window_.push_back(id);
  // A byte-fallback token only lengthens the trailing run held back below: the decodable part of
  // the window, and so the output, stay as they were. Returning here keeps a long run of byte
  // tokens (Llama 2 writes each newline as <0x0A>) linear instead of re-decoding it per token.
  if (holds_byte_runs_ && tokenizer_->is_byte_fallback_token(id)) return {};

  // A trailing run of <0xHH> tokens decodes as a group (all U+FFFD if invalid): wait for its end.
  size_t decodable = window_.size();
  if (holds_byte_runs_) {
    while (decodable > 0 && tokenizer_->is_byte_fallback_token(window_[decodable - 1])) --decodable;
  }
  const std::string text = tokenizer_->decode_window(window_.data(), decodable, window_at_start_);
  size_t stable = text.size();
  const std::string_view fffd = utf8::kReplacementChar;
  while (stable >= fffd.size() && text.compare(stable - fffd.size(), fffd.size(), fffd) == 0) {
    stable -= fffd.size();
  }
  std::string delta;
  if (stable > emitted_.size() && text.compare(0, emitted_.size(), emitted_) == 0) {
    delta = text.substr(emitted_.size(), stable - emitted_.size());
    emitted_ += delta;
  }
  if (decodable == window_.size() && stable == text.size() && emitted_.size() == text.size()) {
    // Everything decoded so far is out and ends on a character boundary: start a new window.
    window_.clear();
    emitted_.clear();
    window_at_start_ = false;
  }
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  const std::string text = tokenizer_->decode_window(window_.data(), window_.size(), window_at_start_);
  // Normally `text` extends what was emitted; keep the output consistent if it does not.
  size_t common = 0;
  while (common < emitted_.size() && common < text.size() && emitted_[common] == text[common]) ++common;
  // Do not cut a character in half.
  while (common > 0 && common < text.size() &&
         (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) {
    --common;
  }
  std::string rest = text.substr(common);
  window_.clear();
  emitted_.clear();
  window_at_start_ = false;
  return rest;
}

}  // namespace pagellm
