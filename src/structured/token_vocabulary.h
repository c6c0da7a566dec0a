// TokenVocabulary: the exact bytes each token id adds to the output, and the vocabulary sorted by
// those bytes (with the common-prefix length of neighbours) so that mask computation can walk it
// as a trie. Built once per tokenizer (about a second for 150k tokens) and shared, read-only, by
// every compiled grammar and matcher of that model.
//
// Which tokens are grammar text: model tokens (byte-level BPE through the GPT-2 byte alphabet,
// <0xHH> byte-fallback tokens as their byte, SentencePiece '▁' as a space) and non-special added
// tokens (their content, as decode() shows it: e.g. Qwen3's "<tool_call>", Gemma's "\n").
// Special tokens are never text; the stop tokens among them (EOS) are allowed only where the
// grammar is complete. Tokens that decode to nothing are never allowed (they would let a
// constrained request run forever).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagellm {
class Tokenizer;
}

namespace pagellm::structured {

class TokenVocabulary {
 public:
  // stop_token_ids: the ids that end generation (generation_config's eos_token_id list); empty
  // means the tokenizer's eos token.
  static Expected<std::shared_ptr<const TokenVocabulary>> from_tokenizer(const Tokenizer& tokenizer,
                                                                         std::vector<int32_t> stop_token_ids = {});
  // For tests: token i is text_by_id[i] (empty = not text).
  static std::shared_ptr<const TokenVocabulary> from_strings(std::vector<std::string> text_by_id,
                                                             std::vector<int32_t> stop_token_ids);

  // Ids are [0, size()); a mask needs mask_words() 32-bit words.
  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_text(int32_t id) const { return id >= 0 && id < size() && !bytes_[static_cast<size_t>(id)].empty(); }
  bool is_stop(int32_t id) const;
  const std::vector<int32_t>& stop_token_ids() const { return stop_ids_; }

  // Text tokens in byte order; lcp(i) = common prefix length of sorted(i-1) and sorted(i).
  size_t num_sorted() const { return sorted_ids_.size(); }
  int32_t sorted_id(size_t i) const { return sorted_ids_[i]; }
  std::string_view sorted_bytes(size_t i) const { return bytes_[static_cast<size_t>(sorted_ids_[i])]; }
  uint32_t lcp(size_t i) const { return lcp_[i]; }
  // The first sorted index after i whose bytes do not start with i's first `depth` bytes
  // (1 <= depth <= length of i): where a walk resumes once that prefix is dead.
  size_t subtree_end(size_t i, size_t depth) const { return subtree_end_[subtree_offset_[i] + depth - 1]; }

 private:
  void finish();

  std::vector<std::string> bytes_;  // by id; empty = not text
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> sorted_ids_;
  std::vector<uint32_t> lcp_;
  std::vector<uint32_t> subtree_offset_;  // by sorted index: where its depths start in subtree_end_
  std::vector<uint32_t> subtree_end_;
};

}  // namespace pagellm::structured
