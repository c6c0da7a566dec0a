// Lexer for the jinja2 template language as transformers configures it: trim_blocks and
// lstrip_blocks on, "-"/"+" whitespace control on every tag, comments dropped, {% raw %} kept
// verbatim. Whitespace handling reproduces jinja2 3.1's lexer rule for rule, because chat prompts
// must match byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pagellm::jinja {

enum class TokenType {
  kData,           // literal template text (already whitespace-controlled)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,         // value: the decoded string
  kInteger,        // int_value
  kFloat,          // float_value
  kOperator,       // value: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  uint32_t pos = 0;  // byte offset into the normalized source
  std::string value;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// The source as jinja2 sees it: newlines normalized to "\n" and one trailing newline dropped
// (keep_trailing_newline=False). Positions in tokens refer to this string.
std::string normalize_template_source(const std::string& source);

// Throws TemplateError (with line and column) on a lexical error.
std::vector<Token> tokenize_template(const std::string& normalized_source);

// 1-based line and column (in code points) of a byte offset.
void position_to_line_col(const std::string& source, uint32_t pos, int* line, int* col);

}  // namespace pagellm::jinja
