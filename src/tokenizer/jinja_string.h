// Python str operations over UTF-8: Python indexes, slices and measures strings in code points and
// its str methods (strip, split, upper, ...) use Unicode whitespace and case rules. Templates see
// only valid UTF-8 (inputs are checked at the API boundary), so these helpers assume it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::jinja {

std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
size_t utf8_length(std::string_view s);  // code points
bool is_ascii(std::string_view s);

// Python str.isspace() for one code point (also what `\s` matches in jinja2's lexer).
bool py_is_space(char32_t cp);
// Byte length of the Python-whitespace prefix/suffix of s.
size_t py_space_prefix_bytes(std::string_view s);
size_t py_space_suffix_bytes(std::string_view s);

// str.strip/lstrip/rstrip: chars == nullptr strips whitespace, otherwise any code point in *chars.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit; sep == nullptr splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::string* sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old_sub, std::string_view new_sub,
                       int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);  // str.title()
// str.find/rfind/count over code points; returns code point index or -1.
int64_t py_find(std::string_view s, std::string_view sub, bool from_right);
int64_t py_count(std::string_view s, std::string_view sub);
bool py_is_alpha(char32_t cp);
bool py_is_alnum(char32_t cp);
bool py_is_digit(char32_t cp);
bool py_is_printable(char32_t cp);

}  // namespace pagellm::jinja
