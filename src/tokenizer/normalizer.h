// Normalizers of tokenizer.json ("normalizer": {...}): rewrite the text of each piece between
// added tokens before pre-tokenization. Offsets are not tracked: pagellm needs ids, not spans.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pagellm {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` (valid UTF-8) in place.
  virtual Status normalize(std::string& text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object; null JSON gives
// nullptr (no normalization). Unknown or unsupported types are an error naming the type.
Expected<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config);

// Unicode normalization forms via utf8proc, with a quick check that skips text that is already
// in NFC (exposed for tests and for the added-token matcher).
enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };
std::string unicode_normalize(const std::string& text, UnicodeForm form);

}  // namespace pagellm
