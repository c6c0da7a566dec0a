// Added tokens of tokenizer.json ("added_tokens": [...]): strings that are cut out of the input
// before normalization and the model ever see it, each becoming one id. As in Hugging Face
// tokenizers, tokens with normalized=false are matched in the raw input, tokens with
// normalized=true in the normalized text of what lies between them; matching is leftmost-longest,
// then single_word / lstrip / rstrip are applied.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace pagellm {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A cut of some text: [begin, end) with the added token's id, or id -1 for ordinary text.
struct TextSegment {
  uint32_t begin = 0;
  uint32_t end = 0;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) turns the content of normalized=true tokens into the form they
  // take in normalized text.
  static Expected<AddedVocabulary> build(std::vector<AddedToken> tokens,
                                         const Normalizer* normalizer);

  // Cuts `text` with the raw (normalized=false) or the normalized (normalized=true) tokens.
  void split_raw(std::string_view text, std::vector<TextSegment>& out) const {
    raw_.split(text, tokens_, out);
  }
  void split_normalized(std::string_view text, std::vector<TextSegment>& out) const {
    normalized_.split(text, tokens_, out);
  }
  bool has_normalized_tokens() const { return !normalized_.empty(); }

  const AddedToken* find_by_id(int32_t id) const;
  const AddedToken* find_by_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie over token contents, walked from every position for leftmost-longest matches.
  class Matcher {
   public:
    void add(std::string_view pattern, int32_t token_index);
    bool empty() const { return nodes_.size() <= 1; }
    void split(std::string_view text, const std::vector<AddedToken>& tokens,
               std::vector<TextSegment>& out) const;

   private:
    int32_t child(int32_t node, unsigned char byte) const;
    std::vector<int32_t> terminal_{-1};  // node -> token index or -1
    std::vector<uint32_t> nodes_{0};     // node count holder (size = number of nodes)
    std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child node
    bool first_byte_[256] = {};
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  std::unordered_map<std::string, size_t> index_by_content_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace pagellm
