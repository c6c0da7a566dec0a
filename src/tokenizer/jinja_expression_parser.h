// Expression grammar of jinja2 3.1, precedence from loosest to tightest:
// condexpr < or < and < not < compare (==, in, not in, ...) < + - < ~ < * / // % < ** < unary -/+
// < primary with postfix (.attr, [item], (call)) and filters/tests (| f, is t).
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "tokenizer/jinja_token_stream.h"

namespace pagellm::jinja {

class ExpressionParser : public TokenStream {
 public:
  using TokenStream::TokenStream;

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const;
  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr, std::initializer_list<const char*> extra_end);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(const std::string& op, uint32_t pos, ExprPtr left, ExprPtr right);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr operand);
  void check_filter(const Expr& e) const;
  void parse_filter_chain(std::vector<ExprPtr>& out, bool starts_with_pipe = false);
  ExprPtr parse_test(ExprPtr operand);
};

}  // namespace pagellm::jinja
