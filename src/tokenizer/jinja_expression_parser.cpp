#include "tokenizer/jinja_expression_parser.h"

#include "tokenizer/jinja_filters.h"

namespace pagellm::jinja {

bool ExpressionParser::is_tuple_end(std::initializer_list<const char*> extra_end) const {
  if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")")) return true;
  return at_end_token(extra_end);
}

ExprPtr ExpressionParser::parse_tuple(bool explicit_parens, bool with_condexpr, std::initializer_list<const char*> extra_end) {
  uint32_t pos = cur().pos;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(parse_expression(with_condexpr));
    if (is_op(",")) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail("Expected an expression, got " + describe(cur()));
  }
  auto e = node(ExprKind::kTuple, pos);
  e->items = std::move(args);
  return e;
}

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  if (!with_condexpr) return parse_or();
  uint32_t pos = cur().pos;
  ExprPtr expr1 = parse_or();
  ChainGuard chain(*this);
  while (skip_name("if")) {
    chain.step();
    auto e = node(ExprKind::kCondExpr, pos);
    e->a = parse_or();
    if (skip_name("else")) e->c = parse_expression(true);
    e->b = std::move(expr1);
    expr1 = std::move(e);
  }
  return expr1;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  ChainGuard chain(*this);
  while (is_name("or")) {
    chain.step();
    auto e = node(ExprKind::kOr, cur().pos);
    advance();
    e->a = std::move(left);
    e->b = parse_and();
    left = std::move(e);
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  ChainGuard chain(*this);
  while (is_name("and")) {
    chain.step();
    auto e = node(ExprKind::kAnd, cur().pos);
    advance();
    e->a = std::move(left);
    e->b = parse_not();
    left = std::move(e);
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto e = node(ExprKind::kNot, cur().pos);
    advance();
    e->a = parse_not();
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  uint32_t pos = cur().pos;
  ExprPtr expr = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
         cur().value == ">" || cur().value == ">=")) {
      op = cur().value;
      advance();
    } else if (is_name("in")) {
      op = "in";
      advance();
    } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::kCompare, pos);
      cmp->a = std::move(expr);
    }
    cmp->ops.push_back(op);
    cmp->items.push_back(parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(expr);
}

ExprPtr ExpressionParser::binary(const std::string& op, uint32_t pos, ExprPtr left, ExprPtr right) {
  auto e = node(ExprKind::kBinary, pos);
  e->name = op;
  e->a = std::move(left);
  e->b = std::move(right);
  return e;
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  ChainGuard chain(*this);
  while (is_op("+") || is_op("-")) {
    chain.step();
    std::string op = cur().value;
    uint32_t pos = cur().pos;
    advance();
    left = binary(op, pos, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  uint32_t pos = cur().pos;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = node(ExprKind::kConcat, pos);
  e->items.push_back(std::move(first));
  while (skip_op("~")) e->items.push_back(parse_math2());
  return e;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  ChainGuard chain(*this);
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    chain.step();
    std::string op = cur().value;
    uint32_t pos = cur().pos;
    advance();
    left = binary(op, pos, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  ChainGuard chain(*this);
  while (is_op("**")) {
    chain.step();
    uint32_t pos = cur().pos;
    advance();
    left = binary("**", pos, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
    advance();
    e->a = parse_unary(false);
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = cur();
  if (t.type == TokenType::kName) {
    ExprPtr e;
    if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
      e = node(ExprKind::kLiteral, t.pos);
      e->literal = Value(t.value == "true" || t.value == "True");
    } else if (t.value == "none" || t.value == "None") {
      e = node(ExprKind::kLiteral, t.pos);
      e->literal = Value(None{});
    } else {
      e = node(ExprKind::kName, t.pos);
      e->name = t.value;
    }
    advance();
    return e;
  }
  if (t.type == TokenType::kString) {
    auto e = node(ExprKind::kLiteral, t.pos);
    std::string s;
    while (cur().type == TokenType::kString) {  // adjacent literals concatenate
      s += cur().value;
      advance();
    }
    e->literal = Value(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
    auto e = node(ExprKind::kLiteral, t.pos);
    e->literal = t.type == TokenType::kInteger ? Value(t.int_value) : Value(t.float_value);
    advance();
    return e;
  }
  if (is_op("(")) {
    advance();
    ExprPtr e = parse_tuple(true, true, {});
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    auto e = node(ExprKind::kList, t.pos);
    advance();
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }
  if (is_op("{")) {
    auto e = node(ExprKind::kDict, t.pos);
    advance();
    while (!is_op("}")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("}")) break;
      e->items.push_back(parse_expression(true));
      expect_op(":");
      e->items.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }
  fail("unexpected token");
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr e) {
  ChainGuard chain(*this);
  while (true) {
    chain.step();
    if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
    else if (is_op("(")) e = parse_call(std::move(e));
    else return e;
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr e) {
  ChainGuard chain(*this);
  while (true) {
    chain.step();
    if (is_op("|")) {
      e = parse_filter(std::move(e));
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr obj) {
  DepthGuard guard(*this);
  uint32_t pos = cur().pos;
  if (skip_op(".")) {
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      auto e = node(ExprKind::kGetAttr, pos);
      e->a = std::move(obj);
      e->name = t.value;
      advance();
      return e;
    }
    if (t.type != TokenType::kInteger) fail("expected name or number");
    auto e = node(ExprKind::kGetItem, pos);
    e->a = std::move(obj);
    e->b = node(ExprKind::kLiteral, t.pos);
    e->b->literal = Value(t.int_value);
    advance();
    return e;
  }
  expect_op("[");
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  auto e = node(ExprKind::kGetItem, pos);
  e->a = std::move(obj);
  if (args.size() == 1) {
    e->b = std::move(args[0]);
  } else {
    e->b = node(ExprKind::kTuple, pos);
    e->b->items = std::move(args);
  }
  return e;
}

ExprPtr ExpressionParser::parse_subscribed() {
  uint32_t pos = cur().pos;
  ExprPtr first;
  if (!is_op(":")) {
    first = parse_expression(true);
    if (!is_op(":")) return first;
  }
  auto e = node(ExprKind::kSlice, pos);
  e->a = std::move(first);
  advance();  // ':'
  if (!is_op("]") && !is_op(",") && !is_op(":")) e->b = parse_expression(true);
  if (skip_op(":")) {
    if (!is_op("]") && !is_op(",")) e->c = parse_expression(true);
  }
  return e;
}

void ExpressionParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!is_op(")")) {
    if (!first) {
      expect_op(",");
      if (is_op(")")) break;
    }
    first = false;
    if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
      std::string key = cur().value;
      advance();
      advance();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail("Invalid argument syntax: positional argument after keyword argument");
      e.items.push_back(parse_expression(true));
    }
  }
  expect_op(")");
}

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  DepthGuard guard(*this);
  auto e = node(ExprKind::kCall, callee->pos);  // errors point at the callee, not at "("
  e->a = std::move(callee);
  parse_call_args(*e);
  return e;
}

ExprPtr ExpressionParser::parse_filter(ExprPtr operand) {
  DepthGuard guard(*this);
  expect_op("|");
  auto e = node(ExprKind::kFilter, cur().pos);
  e->name = expect_name();
  while (is_op(".")) {
    advance();
    e->name += "." + expect_name();
  }
  check_filter(*e);
  if (is_op("(")) parse_call_args(*e);
  e->a = std::move(operand);
  return e;
}

void ExpressionParser::check_filter(const Expr& e) const {
  if (!is_known_filter(e.name)) fail_at(e.pos, "no filter named '" + e.name + "' (unknown or unsupported)");
}

// `{% filter a|b(x) %}` and `{% set x | a %}`: a chain of filters without an operand.
void ExpressionParser::parse_filter_chain(std::vector<ExprPtr>& out, bool starts_with_pipe) {
  if (!starts_with_pipe) {
    // First filter has no leading "|".
    auto e = node(ExprKind::kFilter, cur().pos);
    e->name = expect_name();
    check_filter(*e);
    if (is_op("(")) parse_call_args(*e);
    out.push_back(std::move(e));
  }
  while (is_op("|")) out.push_back(parse_filter(nullptr));
}

ExprPtr ExpressionParser::parse_test(ExprPtr operand) {
  DepthGuard guard(*this);
  uint32_t pos = cur().pos;
  advance();  // 'is'
  bool negated = skip_name("not");
  auto e = node(ExprKind::kTest, pos);
  e->name = expect_name();
  while (is_op(".")) {
    advance();
    e->name += "." + expect_name();
  }
  if (!is_known_test(e->name)) fail_at(e->pos, "no test named '" + e->name + "' (unknown or unsupported)");
  const Token& t = cur();
  if (is_op("(")) {
    parse_call_args(*e);
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
              t.type == TokenType::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
             !(is_name("else") || is_name("or") || is_name("and"))) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    e->items.push_back(parse_postfix(parse_primary()));
  }
  e->a = std::move(operand);
  if (!negated) return e;
  auto n = node(ExprKind::kNot, pos);
  n->a = std::move(e);
  return n;
}

}  // namespace pagellm::jinja
