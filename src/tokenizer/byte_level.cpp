#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace pagellm {

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_cp_.fill(-1);
  auto is_printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = is_printable(b) ? char32_t(b) : char32_t(256 + next_extra++);
    std::string s;
    utf8::append(s, cp);
    char_lens_[b] = static_cast<uint8_t>(s.size());
    for (size_t i = 0; i < s.size(); ++i) chars_[b][i] = s[i];
    byte_of_cp_[cp] = static_cast<int16_t>(b);
  }
}

std::string ByteLevelAlphabet::encode(std::string_view bytes) const {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out.append(char_of(b));
  return out;
}

std::optional<std::string> ByteLevelAlphabet::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (utf8::sequence_length(static_cast<unsigned char>(text[pos])) == 0) return std::nullopt;
    const auto b = byte_of(utf8::decode_at(text, pos));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace pagellm
