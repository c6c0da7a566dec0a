// Token stream shared by the expression and statement parsers: lookahead, expectations,
// errors with line and column, and the nesting limits that keep recursion bounded.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace pagellm::jinja {

// Expressions and blocks nested deeper than this are refused: the parser and the interpreter
// recurse once per level and must not exhaust the stack on hostile input.
constexpr int kMaxNesting = 256;

inline const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::kData: return "template data";
    case TokenType::kVariableBegin: return "begin of print statement";
    case TokenType::kVariableEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInteger: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOperator: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

class TokenStream {
 public:
  TokenStream(const std::string& source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}

 protected:
  const Token& cur() const { return toks_[i_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(i_ + n, toks_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < toks_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  std::string describe(const Token& t) const {
    if (t.type == TokenType::kName || t.type == TokenType::kOperator) return "'" + t.value + "'";
    return token_type_name(t.type);
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(cur().pos, message + (message == "unexpected token" ? " " + describe(cur()) : "")); }
  [[noreturn]] void fail_at(uint32_t pos, const std::string& message) const {
    int line, col;
    position_to_line_col(src_, pos, &line, &col);
    throw TemplateError(message, line, col);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_type(TokenType t) {
    if (cur().type != t) fail(std::string("expected ") + token_type_name(t) + ", got " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()));
    std::string v = cur().value;
    advance();
    return v;
  }

  struct DepthGuard {
    DepthGuard(TokenStream& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    ~DepthGuard() { --p.depth_; }
    TokenStream& p;
  };

  // Left-associative chains (a.b.c, a + b + c, x|f|g) deepen the tree without recursing here;
  // each link counts as one nesting level until the chain's parse function returns.
  struct ChainGuard {
    explicit ChainGuard(TokenStream& p) : p(p) {}
    void step() {
      ++links;
      if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    ~ChainGuard() { p.depth_ -= links; }
    TokenStream& p;
    int links = 0;
  };

  ExprPtr node(ExprKind kind, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  bool at_end_token(std::initializer_list<const char*> end_tokens) const {
    if (cur().type != TokenType::kName) return false;
    for (const char* t : end_tokens)
      if (cur().value == t) return true;
    return false;
  }

  const std::string& src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace pagellm::jinja
