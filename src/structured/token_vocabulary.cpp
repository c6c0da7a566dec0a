#include "structured/token_vocabulary.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pagellm::structured {

namespace {

// The bytes one token adds in the middle of an output. The tokenizer's own decoder is the
// authority when the token is whole UTF-8; a token that is part of a character (byte-level
// pieces, <0xHH>) decodes lossily on its own, so its bytes come from the alphabet instead.
std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  const std::string piece = tokenizer.id_to_token(id);
  unsigned char byte = 0;
  if (tokenizer.is_byte_fallback_token(id) && parse_byte_fallback_token(piece, byte)) {
    return std::string(1, static_cast<char>(byte));
  }
  std::string decoded = tokenizer.decode_window(&id, 1, /*at_start=*/false);
  if (decoded.find(utf8::kReplacementChar) == std::string::npos) return decoded;
  if (auto raw = ByteLevelAlphabet::get().decode(piece)) return *raw;
  return decoded;  // the token really is U+FFFD
}

}  // namespace

Expected<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                                                 std::vector<int32_t> stop_token_ids) {
  auto vocab = std::make_shared<TokenVocabulary>();
  if (stop_token_ids.empty() && tokenizer.eos_token_id()) stop_token_ids.push_back(*tokenizer.eos_token_id());
  vocab->stop_ids_ = std::move(stop_token_ids);
  vocab->bytes_.resize(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.has_token(id) || tokenizer.is_special(id) || vocab->is_stop(id)) continue;
    vocab->bytes_[static_cast<size_t>(id)] = token_text(tokenizer, id);
  }
  for (int32_t id : vocab->stop_ids_) {
    if (id < 0 || id >= tokenizer.vocab_size()) {
      return invalid_argument("[structured] stop token id {} is outside the vocabulary", id);
    }
  }
  vocab->finish();
  return std::shared_ptr<const TokenVocabulary>(std::move(vocab));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_strings(std::vector<std::string> text_by_id,
                                                                     std::vector<int32_t> stop_token_ids) {
  auto vocab = std::make_shared<TokenVocabulary>();
  vocab->bytes_ = std::move(text_by_id);
  vocab->stop_ids_ = std::move(stop_token_ids);
  for (int32_t id : vocab->stop_ids_) vocab->bytes_[static_cast<size_t>(id)].clear();
  vocab->finish();
  return vocab;
}

bool TokenVocabulary::is_stop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

void TokenVocabulary::finish() {
  sorted_ids_.clear();
  for (int32_t id = 0; id < size(); ++id) {
    if (is_text(id)) sorted_ids_.push_back(id);
  }
  std::sort(sorted_ids_.begin(), sorted_ids_.end(), [&](int32_t a, int32_t b) {
    const int c = token_bytes(a).compare(token_bytes(b));
    return c != 0 ? c < 0 : a < b;
  });
  lcp_.assign(sorted_ids_.size(), 0);
  for (size_t i = 1; i < sorted_ids_.size(); ++i) {
    const std::string_view prev = sorted_bytes(i - 1), cur = sorted_bytes(i);
    uint32_t n = 0;
    while (n < prev.size() && n < cur.size() && prev[n] == cur[n]) ++n;
    lcp_[i] = n;
  }
  // subtree_end(i, d) = i + 1 when the next token leaves the prefix, else the next token's own.
  subtree_offset_.assign(sorted_ids_.size() + 1, 0);
  for (size_t i = 0; i < sorted_ids_.size(); ++i) {
    subtree_offset_[i + 1] = subtree_offset_[i] + static_cast<uint32_t>(sorted_bytes(i).size());
  }
  subtree_end_.assign(subtree_offset_.back(), 0);
  for (size_t i = sorted_ids_.size(); i-- > 0;) {
    for (size_t d = 1; d <= sorted_bytes(i).size(); ++d) {
      const bool next_shares = i + 1 < sorted_ids_.size() && lcp_[i + 1] >= d;
      subtree_end_[subtree_offset_[i] + d - 1] =
          next_shares ? subtree_end_[subtree_offset_[i + 1] + d - 1] : static_cast<uint32_t>(i + 1);
    }
  }
}

}  // namespace pagellm::structured
