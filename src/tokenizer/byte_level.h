// The GPT-2 byte-level alphabet: each of the 256 byte values is shown as one printable code point
// (printable Latin-1 bytes as themselves, the others as U+0100 + n in byte order), so that byte
// strings can live in a JSON vocabulary. Used by the ByteLevel pre-tokenizer, BPE and decoder.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagellm {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // UTF-8 encoding of the code point that stands for byte `b`.
  std::string_view char_of(uint8_t b) const { return {chars_[b].data(), char_lens_[b]}; }
  // The byte a code point stands for, if it is part of the alphabet.
  std::optional<uint8_t> byte_of(char32_t cp) const {
    if (cp >= 512 || byte_of_cp_[cp] < 0) return std::nullopt;
    return static_cast<uint8_t>(byte_of_cp_[cp]);
  }
  // Bytes -> alphabet string.
  std::string encode(std::string_view bytes) const;
  // Alphabet string -> bytes; nullopt when some code point is outside the alphabet.
  std::optional<std::string> decode(std::string_view text) const;

 private:
  ByteLevelAlphabet();
  std::array<std::array<char, 2>, 256> chars_{};
  std::array<uint8_t, 256> char_lens_{};
  std::array<int16_t, 512> byte_of_cp_{};
};

}  // namespace pagellm
