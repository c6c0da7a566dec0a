// UTF-8 helpers shared by the tokenizer: validation, code point iteration, and the exact
// lossy conversion Hugging Face tokenizers uses (Rust's String::from_utf8_lossy), so that our
// decode of arbitrary ids replaces invalid bytes with U+FFFD exactly where theirs does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace pagellm::utf8 {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first byte that is not part of a valid UTF-8 sequence (s.size() when the
// whole string is valid). Overlong forms, surrogates and code points past U+10FFFF are invalid.
size_t first_invalid_offset(std::string_view s);
inline bool is_valid(std::string_view s) { return first_invalid_offset(s) == s.size(); }

// Length of the sequence whose lead byte is `lead` (1..4), 0 for a byte that cannot lead.
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// Decodes the code point at s[pos] (s must be valid UTF-8 there) and advances pos past it.
inline char32_t decode_at(std::string_view s, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + pos;
  if (p[0] < 0x80) {
    pos += 1;
    return p[0];
  }
  if (p[0] < 0xE0) {
    pos += 2;
    return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (p[0] < 0xF0) {
    pos += 3;
    return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  pos += 4;
  return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
         (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

void append(std::string& out, char32_t cp);

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD, and an
// incomplete sequence at the very end becomes one U+FFFD.
std::string from_bytes_lossy(std::string_view bytes);
void append_lossy(std::string& out, std::string_view bytes);

// Number of bytes at the end of `s` that form a proper prefix of a valid multi-byte sequence
// (0..3): what a streaming decoder must hold back until more bytes arrive.
size_t incomplete_tail_length(std::string_view s);

// For one-line messages: control characters (< 0x20, 0x7F) as \n, \r, \t or \xHH.
std::string escape_controls(std::string_view s);

}  // namespace pagellm::utf8
