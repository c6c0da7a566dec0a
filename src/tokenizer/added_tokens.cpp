#include "tokenizer/added_tokens.h"

#include <algorithm>

#include <utf8proc.h>

#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"

namespace pagellm {
namespace {

bool is_white_space(char32_t cp) {
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Rust's char::is_alphanumeric: Alphabetic or Numeric; approximated by letter/number categories.
bool is_alphanumeric(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  switch (category) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

size_t previous_char_start(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return start;
}

}  // namespace

int32_t AddedVocabulary::Matcher::child(int32_t node, unsigned char byte) const {
  auto it = edges_.find((uint64_t(node) << 8) | byte);
  return it == edges_.end() ? -1 : it->second;
}

void AddedVocabulary::Matcher::add(std::string_view pattern, int32_t token_index) {
  if (pattern.empty()) return;
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  int32_t node = 0;
  for (unsigned char c : pattern) {
    int32_t next = child(node, c);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(0);
      terminal_.push_back(-1);
      edges_.emplace((uint64_t(node) << 8) | c, next);
    }
    node = next;
  }
  // The first token with a given content wins, like HF's map of patterns.
  if (terminal_[node] < 0) terminal_[node] = token_index;
}

void AddedVocabulary::Matcher::split(std::string_view text, const std::vector<AddedToken>& tokens,
                                     std::vector<TextSegment>& out) const {
  const auto n = static_cast<uint32_t>(text.size());
  uint32_t start_offset = 0;
  if (!empty()) {
    uint32_t pos = 0;
    while (pos < n) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      // Longest token starting at pos.
      int32_t node = 0;
      int32_t best = -1;
      uint32_t best_end = 0;
      for (uint32_t i = pos; i < n; ++i) {
        node = child(node, static_cast<unsigned char>(text[i]));
        if (node < 0) break;
        if (terminal_[node] >= 0) {
          best = terminal_[node];
          best_end = i + 1;
        }
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      const AddedToken& token = tokens[best];
      uint32_t start = pos, stop = best_end;
      if (token.single_word) {
        // Only a whole word: no alphanumeric character glued on either side.
        bool start_ok = start == 0;
        if (!start_ok) {
          size_t p = previous_char_start(text, start);
          start_ok = !is_alphanumeric(utf8::decode_at(text, p));
        }
        bool stop_ok = stop == n;
        if (!stop_ok) {
          size_t p = stop;
          stop_ok = !is_alphanumeric(utf8::decode_at(text, p));
        }
        if (!start_ok || !stop_ok) {
          pos = best_end;  // leftmost-longest matching resumes after the rejected match
          continue;
        }
      }
      if (token.lstrip) {
        // Swallow the whitespace before the token (but not into the previous segment's match).
        uint32_t s = start;
        while (s > 0) {
          const size_t p0 = previous_char_start(text, s);
          size_t p = p0;
          if (!is_white_space(utf8::decode_at(text, p))) break;
          s = static_cast<uint32_t>(p0);
        }
        start = std::max(s, start_offset);
      }
      if (token.rstrip) {
        while (stop < n) {
          size_t p = stop;
          if (!is_white_space(utf8::decode_at(text, p))) break;
          stop = static_cast<uint32_t>(p);
        }
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, token.id});
      start_offset = stop;
      pos = std::max(best_end, stop);
    }
  }
  if (start_offset < n || n == 0) out.push_back({start_offset, n, -1});
}

Expected<AddedVocabulary> AddedVocabulary::build(std::vector<AddedToken> tokens,
                                                 const Normalizer* normalizer) {
  AddedVocabulary vocab;
  vocab.tokens_ = std::move(tokens);
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    const AddedToken& token = vocab.tokens_[i];
    if (token.content.empty()) {
      return invalid_argument("[tokenizer] added token {} has empty content", token.id);
    }
    if (!utf8::is_valid(token.content)) {
      return invalid_argument("[tokenizer] added token {} is not valid UTF-8", token.id);
    }
    vocab.index_by_id_.emplace(token.id, i);
    vocab.index_by_content_.emplace(token.content, i);
    if (token.normalized && normalizer) {
      std::string content = token.content;
      PAGELLM_RETURN_IF_ERROR(normalizer->normalize(content));
      vocab.normalized_.add(content, static_cast<int32_t>(i));
    } else if (token.normalized) {
      vocab.normalized_.add(token.content, static_cast<int32_t>(i));
    } else {
      vocab.raw_.add(token.content, static_cast<int32_t>(i));
    }
  }
  return vocab;
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_by_content(std::string_view content) const {
  auto it = index_by_content_.find(std::string(content));
  return it == index_by_content_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace pagellm
