// Tokenizer: a Hugging Face tokenizer.json (BPE models) loaded into pagellm, encoding and decoding
// exactly as the `tokenizers` library does for the same file.
//
//   encode:  text ─ added tokens cut out (raw) ─▶ normalizer ─▶ added tokens (normalized)
//                 ─▶ pre-tokenizer ─▶ BPE per word ─▶ post-processor (if add_special_tokens)
//   decode:  ids ─▶ token strings (special ones dropped if asked) ─▶ decoder chain ─▶ text
//
// A Tokenizer is immutable after loading and safe to share between threads (the word cache
// inside the model has its own locks). Streaming output: see detokenizer.h and stop_strings.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagellm {

class Normalizer;
class Decoder;
class BpeModel;
class AddedVocabulary;
struct PreTokenizerChain;
class PostProcessor;

class Tokenizer {
 public:
  // Loads a tokenizer.json (a directory is read as from_dir).
  static Expected<std::shared_ptr<const Tokenizer>> from_file(const std::string& tokenizer_json_path);
  // Loads dir/tokenizer.json, plus dir/tokenizer_config.json when present (bos/eos tokens,
  // add_bos_token / add_eos_token; they are reported, encode() itself follows tokenizer.json).
  static Expected<std::shared_ptr<const Tokenizer>> from_dir(const std::string& dir);
  // Parses tokenizer.json text (and optional tokenizer_config.json text; empty = none).
  static Expected<std::shared_ptr<const Tokenizer>> from_json_text(std::string_view tokenizer_json,
                                                                   std::string_view config_json = {});
  ~Tokenizer();

  // Text must be valid UTF-8. Added tokens in the text are always recognized (as HF does);
  // add_special_tokens only controls the post-processor's BOS/EOS template.
  Expected<std::vector<int32_t>> encode(std::string_view text, bool add_special_tokens) const;
  // Unknown ids are skipped; invalid byte sequences become U+FFFD (as HF does).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  // Decodes a window of tokens that may start in the middle of an output (at_start = false):
  // what the incremental detokenizer uses. Special ids are NOT filtered here.
  std::string decode_window(const int32_t* ids, size_t count, bool at_start) const;
  // True when a trailing run of byte-fallback tokens may still change its decoded text.
  bool decoder_has_byte_fallback() const;
  bool is_byte_fallback_token(int32_t id) const;

  // Number of rows an embedding table needs: 1 + the largest id of the model or added tokens.
  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as in tokenizer.json ("" for an unknown id).
  std::string id_to_token(int32_t id) const;
  // The id names a token (decode skips the others).
  bool has_token(int32_t id) const { return token_string(id) != nullptr; }
  bool is_special(int32_t id) const {
    return id >= 0 && id < vocab_size_ && is_special_[static_cast<size_t>(id)];
  }

  // From tokenizer_config.json when loaded with from_dir (else nullopt / false).
  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  std::optional<int32_t> eos_token_id() const { return eos_token_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool add_bos_token() const { return add_bos_token_; }
  bool add_eos_token() const { return add_eos_token_; }

 private:
  Tokenizer();
  // from_json_text without the final one-line check of error messages.
  static Expected<std::shared_ptr<const Tokenizer>> parse(std::string_view tokenizer_json,
                                                          std::string_view config_json);
  Status encode_text(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const;
  Status encode_words(std::string_view text, bool at_origin, std::vector<int32_t>& ids) const;
  const std::string* token_string(int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizerChain> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<AddedVocabulary> added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  int64_t vocab_size_ = 0;
  std::vector<bool> is_special_;       // by id: content is one of the special added tokens
  std::vector<bool> is_byte_fallback_;  // by id: token is "<0xHH>"

  std::optional<int32_t> bos_token_id_, eos_token_id_;
  std::string bos_token_, eos_token_;
  bool add_bos_token_ = false, add_eos_token_ = false;
};

}  // namespace pagellm
