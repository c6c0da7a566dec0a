#include "tokenizer/utf8.h"

namespace pagellm::utf8 {
namespace {

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Allowed range of the second byte after `lead` (Unicode Table 3-7, well-formed sequences).
void second_byte_range(unsigned char lead, unsigned char& lo, unsigned char& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

// Examines the sequence at s[pos]. Returns its length when valid; otherwise sets `error_len` to
// the number of bytes forming the maximal invalid subpart (0 means "truncated at the end").
size_t check_sequence(std::string_view s, size_t pos, size_t& error_len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const size_t len = sequence_length(p[pos]);
  if (len == 1) return 1;
  if (len == 0) {
    error_len = 1;
    return 0;
  }
  unsigned char lo, hi;
  second_byte_range(p[pos], lo, hi);
  for (size_t k = 1; k < len; ++k) {
    if (pos + k >= n) {
      error_len = 0;  // a valid prefix cut off by the end of input
      return 0;
    }
    const unsigned char b = p[pos + k];
    const bool ok = k == 1 ? (b >= lo && b <= hi) : is_continuation(b);
    if (!ok) {
      error_len = k;
      return 0;
    }
  }
  return len;
}

}  // namespace

size_t first_invalid_offset(std::string_view s) {
  size_t pos = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (pos < s.size()) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, p + pos, 8);
      if (w & 0x8080808080808080ULL) break;
      pos += 8;
    }
    if (pos >= s.size()) break;
    if (p[pos] < 0x80) {
      ++pos;
      continue;
    }
    size_t error_len = 0;
    const size_t len = check_sequence(s, pos, error_len);
    if (len == 0) return pos;
    pos += len;
  }
  return s.size();
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

void append_lossy(std::string& out, std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t error_len = 0;
    const size_t len = check_sequence(bytes, pos, error_len);
    if (len > 0) {
      out.append(bytes.data() + pos, len);
      pos += len;
      continue;
    }
    out.append(kReplacementChar);
    if (error_len == 0) break;  // truncated tail: one replacement for all of it
    pos += error_len;
  }
}

std::string from_bytes_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_lossy(out, bytes);
  return out;
}

size_t incomplete_tail_length(std::string_view s) {
  // A proper prefix has at most 3 bytes; find the last lead byte among the final 3.
  const size_t n = s.size();
  for (size_t k = 1; k <= 3 && k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[n - k]);
    if (is_continuation(b)) continue;
    const size_t len = sequence_length(b);
    if (len <= k) return 0;  // ASCII, complete, or not a lead byte at all
    size_t error_len = 0;
    const size_t valid_len = check_sequence(s, n - k, error_len);
    return (valid_len == 0 && error_len == 0) ? k : 0;
  }
  return 0;
}

std::string escape_controls(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7F) {
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      static constexpr char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
  }
  return out;
}

}  // namespace pagellm::utf8
