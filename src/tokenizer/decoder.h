// Decoders of tokenizer.json ("decoder": {...}): turn a list of token strings back into text.
// Each decoder rewrites the list (HF's decode_chain); the final text is the concatenation.
//
// `at_start` is true when the list begins at the first token of the whole output; Metaspace
// drops its prefix space only there. The incremental detokenizer decodes windows that start
// mid-output with at_start = false.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pagellm {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens, bool at_start) const = 0;
  // True when a run of <0xHH> tokens at the end of a window may still change how it decodes
  // (ByteFallback turns an invalid run into one U+FFFD per byte).
  virtual bool has_byte_fallback() const { return false; }
};

// Builds the decoder of a tokenizer.json "decoder" (null gives nullptr: tokens joined by spaces).
Expected<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config);

// "<0xHH>" -> the byte, for ByteFallback tokens.
bool parse_byte_fallback_token(const std::string& token, unsigned char& byte);

}  // namespace pagellm
