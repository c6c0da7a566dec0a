// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, merge ranks, and
// the word -> ids algorithm of Hugging Face tokenizers (lowest-rank pair first, leftmost among
// equal ranks), with byte_fallback, unk/fuse_unk, continuing_subword_prefix, end_of_word_suffix
// and ignore_merges.
//
// Byte-level input: when the pre-tokenizer chain ends with ByteLevel, words arrive as raw bytes.
// Each byte maps straight to the id of its alphabet character, and whole-word lookups use a
// vocabulary keyed by raw bytes, so no alphabet string is ever built while encoding.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/flat_string_map.h"

namespace pagellm {

// Heterogeneous-lookup hash map from token text to id.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Largest token id accepted (vocabularies are far smaller; tables are indexed by id).
  static constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

  static Expected<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model,
                                                       bool byte_level_input);
  ~BpeModel();

  // Appends the ids of one pre-tokenized word (raw bytes when byte-level input).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Empty string_view (and has=false) for ids not in the vocabulary.
  const std::string* id_to_token(int32_t id) const;
  int64_t max_id() const { return static_cast<int64_t>(id_to_token_.size()) - 1; }

 private:
  BpeModel() = default;
  struct MergeTable;
  struct WordCache;

  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols) const;
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  FlatStringMap word_vocab_;      // what encoding looks up: raw bytes -> id (byte-level input) or token -> id
  int32_t byte_to_id_[256];       // alphabet char of each byte -> id, -1 if absent
  std::unique_ptr<MergeTable> merges_;
  std::unique_ptr<WordCache> cache_;
  bool byte_level_input_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_fallback_ids_[256];  // id of "<0xHH>", -1 if absent
};

}  // namespace pagellm
