// What decode(encode(s)) gives in HF tokenizers for each real tokenizer family: shared by the
// tokenizer tests and tests/fuzz/fuzz_tokenizer_encode.cpp (no test framework or paths here).
#pragma once

#include <string>
#include <vector>

#include "tokenizer/normalizer.h"

namespace pagellm::test {

inline std::string metaspace_to_spaces(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "\xE2\x96\x81") == 0) {
      out.push_back(' ');
      i += 3;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

// Llama 2 / Mistral (SentencePiece "legacy" tokenizer.json): the Prepend("▁") normalizer runs on
// each stretch of text between added tokens, so every such stretch decodes with a space before it,
// and the decoder's Strip removes one space at the very start of the output only:
// "Hi</s>there" decodes as "Hi</s> there" (as HF tokenizers does).
inline std::string sentencepiece_legacy_round_trip(const std::string& s) {
  static const std::vector<std::string> kAdded = {"<unk>", "</s>", "<s>"};  // longest first
  std::string out, piece;
  auto flush = [&] {
    if (!piece.empty()) out += " " + metaspace_to_spaces(piece);
    piece.clear();
  };
  for (size_t i = 0; i < s.size();) {
    const std::string* hit = nullptr;
    for (const auto& t : kAdded) {
      if (s.compare(i, t.size(), t) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit) {
      flush();
      out += *hit;
      i += hit->size();
    } else {
      piece.push_back(s[i++]);
    }
  }
  flush();
  if (!out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

// What decode(encode(s)) gives in HF for each family: byte-level families give s back (Qwen3 after
// its NFC normalizer); Gemma 3 writes spaces as U+2581 and decodes U+2581 as a space; Llama 2 also,
// with a space after each added token that text follows.
inline std::string expected_round_trip(const std::string& family, const std::string& s) {
  if (family == "qwen3") return unicode_normalize(s, UnicodeForm::kNfc);
  if (family == "gemma3") return metaspace_to_spaces(s);
  if (family == "llama2") return sentencepiece_legacy_round_trip(s);
  return s;
}

}  // namespace pagellm::test
