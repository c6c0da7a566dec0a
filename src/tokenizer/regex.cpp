#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace pagellm {
namespace {

// Unicode White_Space, which is what Oniguruma's \s means for UTF-8 subjects.
constexpr std::string_view kWhiteSpaceItems =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string pcre2_error_text(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread scratch for matching: match data and a JIT stack large enough for very long words.
struct MatchScratch {
  pcre2_match_data* match_data = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchScratch() {
    match_data = pcre2_match_data_create(8, nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

std::string rewrite_whitespace_classes(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's' || next == 'S') {
        const bool negated = next == 'S';
        if (in_class) {
          // Inside [...] only \s appears in the families' patterns; a negated class within a
          // class cannot be written as items, so keep PCRE2's \S there.
          if (negated) {
            out += "\\S";
          } else {
            out += kWhiteSpaceItems;
          }
        } else {
          out += negated ? "[^" : "[";
          out += kWhiteSpaceItems;
          out += "]";
        }
        ++i;
        continue;
      }
      out += c;
      out += next;
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Expected<std::shared_ptr<const Regex>> Regex::compile(std::string_view pattern) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error_code, &error_offset, nullptr);
  if (!code) {
    return invalid_argument("[tokenizer] cannot compile regex '{}' at offset {}: {}", utf8::escape_controls(pattern),
                            error_offset, pcre2_error_text(error_code));
  }
  std::shared_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->code_ = code;
  regex->has_jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const Regex>(std::move(regex));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

Status Regex::find_all(std::string_view subject, std::vector<Span>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& s = scratch();
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const size_t n = subject.size();
  size_t start = 0;
  while (start <= n) {
    const int rc = has_jit_ ? pcre2_jit_match(code, data, n, start, 0, s.match_data, s.context)
                            : pcre2_match(code, data, n, start, PCRE2_NO_UTF_CHECK, s.match_data,
                                          s.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return internal_error("[tokenizer] regex '{}' failed on a {}-byte input: {}",
                            utf8::escape_controls(pattern_), n,
                            pcre2_error_text(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.match_data);
    const size_t begin = ovector[0], end = ovector[1];
    matches.emplace_back(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
    if (end > begin) {
      start = end;
    } else {
      // Empty match: step over one whole character.
      if (end >= n) break;
      size_t step = 1;
      while (end + step < n && (static_cast<unsigned char>(subject[end + step]) & 0xC0) == 0x80) ++step;
      start = end + step;
    }
  }
  return Status::ok();
}

}  // namespace pagellm
