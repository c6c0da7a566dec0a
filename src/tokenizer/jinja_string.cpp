#include "tokenizer/jinja_string.h"

#include <stdexcept>

#include <utf8proc.h>

namespace pagellm::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {  // invalid input never reaches here; map defensively to U+FFFD
      cp = 0xFFFD;
      n = 1;
    }
    out.push_back(static_cast<char32_t>(cp));
    i += static_cast<size_t>(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8_append(out, cp);
  return out;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_ascii(std::string_view s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

bool py_is_space(char32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t py_space_prefix_bytes(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0 || !py_is_space(static_cast<char32_t>(cp))) break;
    i += static_cast<size_t>(n);
  }
  return i;
}

size_t py_space_suffix_bytes(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::u32string cp = utf8_decode(s.substr(start, end - start));
    if (cp.size() != 1 || !py_is_space(cp[0])) break;
    end = start;
  }
  return s.size() - end;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  if (chars == nullptr) {
    size_t begin = left ? py_space_prefix_bytes(s) : 0;
    std::string_view rest = s.substr(begin);
    size_t cut = right ? py_space_suffix_bytes(rest) : 0;
    return std::string(rest.substr(0, rest.size() - cut));
  }
  std::u32string text = utf8_decode(s);
  std::u32string set = utf8_decode(*chars);
  size_t b = 0, e = text.size();
  if (left)
    while (b < e && set.find(text[b]) != std::u32string::npos) ++b;
  if (right)
    while (e > b && set.find(text[e - 1]) != std::u32string::npos) --e;
  return utf8_encode(std::u32string_view(text).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(s.substr(pos));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    return {parts.rbegin(), parts.rend()};
  }
  // Whitespace split: runs of whitespace separate, no empty strings.
  std::u32string text = utf8_decode(s);
  if (!from_right) {
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && py_is_space(text[i])) ++i;
      if (i == text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(utf8_encode(std::u32string_view(text).substr(i)));  // remainder as is
        break;
      }
      size_t j = i;
      while (j < text.size() && !py_is_space(text[j])) ++j;
      parts.push_back(utf8_encode(std::u32string_view(text).substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  size_t e = text.size();
  while (e > 0) {
    while (e > 0 && py_is_space(text[e - 1])) --e;
    if (e == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(utf8_encode(std::u32string_view(text).substr(0, e)));  // remainder as is
      break;
    }
    size_t b = e;
    while (b > 0 && !py_is_space(text[b - 1])) --b;
    parts.push_back(utf8_encode(std::u32string_view(text).substr(b, e - b)));
    e = b;
  }
  return {parts.rbegin(), parts.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string text = utf8_decode(s);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    char32_t c = text[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t eol = i;
    i += (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ? 2 : 1;
    lines.push_back(utf8_encode(std::u32string_view(text).substr(start, (keepends ? i : eol) - start)));
    start = i;
  }
  if (start < text.size()) lines.push_back(utf8_encode(std::u32string_view(text).substr(start)));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                       int64_t count) {
  std::string out;
  if (old_sub.empty()) {
    // Python inserts new_sub between every code point (and at both ends).
    std::u32string text = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= text.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_sub;
        ++done;
      }
      if (i < text.size()) utf8_append(out, text[i]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old_sub, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_sub);
    pos = hit + old_sub.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {

// Full case mappings that differ from the simple one-to-one mapping utf8proc gives.
void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // ß -> SS
    out += "SS";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}
void append_lower(std::string& out, char32_t c) {
  if (c == 0x130) {  // İ -> i̇
    out += "i\xCC\x87";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}
void append_title(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "Ss";
    return;
  }
  utf8_append(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
}
bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) append_upper(out, c);
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : utf8_decode(s)) append_lower(out, c);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : utf8_decode(s)) {
    if (first) append_title(out, c);
    else append_lower(out, c);
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (prev_cased) append_lower(out, c);
    else append_title(out, c);
    prev_cased = is_cased(c);
  }
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool from_right) {
  size_t hit = from_right ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, hit)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = s.find(sub, pos)) != std::string_view::npos) {
    ++n;
    pos += sub.size();
  }
  return n;
}

bool py_is_alpha(char32_t cp) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool py_is_digit(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ND;
}
bool py_is_alnum(char32_t cp) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return py_is_alpha(cp) || cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
         cat == UTF8PROC_CATEGORY_NO;
}
bool py_is_printable(char32_t cp) {
  if (cp == ' ') return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  switch (cat) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

}  // namespace pagellm::jinja
