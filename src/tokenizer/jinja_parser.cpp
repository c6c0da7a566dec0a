#include "tokenizer/jinja_parser.h"

#include <initializer_list>

#include "tokenizer/jinja_filters.h"

namespace pagellm::jinja {

namespace {

// Expressions and blocks nested deeper than this are refused: the parser and the interpreter
// recurse once per level and must not exhaust the stack on hostile input.
constexpr int kMaxNesting = 256;

const char* token_type_name(TokenType t) {
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

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}

  StmtList parse_all() {
    StmtList body = subparse({});
    if (cur().type != TokenType::kEof) fail("unexpected token");
    return body;
  }

 private:
  // ---- token stream ----
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
    DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };

  // Left-associative chains (a.b.c, a + b + c, x|f|g) deepen the tree without recursing here;
  // each link counts as one nesting level until the chain's parse function returns.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : p(p) {}
    void step() {
      ++links;
      if (++p.depth_ > kMaxNesting) p.fail("template nested too deeply (limit " + std::to_string(kMaxNesting) + ")");
    }
    ~ChainGuard() { p.depth_ -= links; }
    Parser& p;
    int links = 0;
  };

  ExprPtr node(ExprKind kind, uint32_t pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // ---- statements ----
  bool at_end_token(std::initializer_list<const char*> end_tokens) const {
    if (cur().type != TokenType::kName) return false;
    for (const char* t : end_tokens)
      if (cur().value == t) return true;
    return false;
  }

  StmtList subparse(std::initializer_list<const char*> end_tokens) {
    StmtList body;
    while (cur().type != TokenType::kEof) {
      const Token& t = cur();
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->pos = t.pos;
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVariableBegin) {
        advance();
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->pos = cur().pos;
        s->expr = parse_tuple(false, true, {});
        expect_type(TokenType::kVariableEnd);
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (end_tokens.size() && at_end_token(end_tokens)) return body;
        body.push_back(parse_statement());
        expect_type(TokenType::kBlockEnd);
      } else {
        fail("unexpected token");
      }
    }
    if (end_tokens.size()) {
      std::string names;
      for (const char* e : end_tokens) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
      fail("unexpected end of template, expected " + names);
    }
    return body;
  }

  // Parses the rest of a block header's end and the body up to one of end_tokens.
  StmtList parse_body(std::initializer_list<const char*> end_tokens, bool drop_needle) {
    skip_op(":");
    expect_type(TokenType::kBlockEnd);
    StmtList body = subparse(end_tokens);
    if (drop_needle) advance();
    return body;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    if (cur().type != TokenType::kName) fail("tag name expected");
    std::string tag = cur().value;
    uint32_t pos = cur().pos;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    advance();
    if (tag == "if") return parse_if(std::move(s));
    if (tag == "for") return parse_for(std::move(s));
    if (tag == "set") return parse_set(std::move(s));
    if (tag == "macro") return parse_macro(std::move(s));
    if (tag == "call") return parse_call_block(std::move(s));
    if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      parse_filter_chain(s->filters);
      s->body = parse_body({"endfilter"}, true);
      return s;
    }
    if (tag == "with") return parse_with(std::move(s));
    if (tag == "generation") {  // transformers' AssistantTracker extension: renders its body
      s->kind = StmtKind::kScope;
      s->body = parse_body({"endgeneration"}, true);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(pos, "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      return s;
    }
    if (tag == "print") {
      s->kind = StmtKind::kOutput;
      s->expr = parse_tuple(false, true, {});
      return s;
    }
    static const char* kUnsupported[] = {"extends", "block", "include", "import", "from", "autoescape", "do", "trans"};
    for (const char* u : kUnsupported)
      if (tag == u) fail_at(pos, "unsupported tag '" + tag + "'");
    fail_at(pos, "Encountered unknown tag '" + tag + "'");
  }

  StmtPtr parse_if(StmtPtr s) {
    s->kind = StmtKind::kIf;
    while (true) {
      ExprPtr test = parse_tuple(false, false, {});
      StmtList body = parse_body({"elif", "else", "endif"}, false);
      s->branches.emplace_back(std::move(test), std::move(body));
      std::string which = cur().value;
      advance();
      if (which == "elif") continue;
      if (which == "else") s->else_body = parse_body({"endif"}, true);
      break;
    }
    return s;
  }

  void parse_targets(Stmt& s, std::initializer_list<const char*> extra_end) {
    // A name or a tuple of names, as in parse_assign_target.
    while (true) {
      if (!s.targets.empty()) {
        if (!skip_op(",")) break;
        s.targets_are_tuple = true;
        if (cur().type != TokenType::kName || at_end_token(extra_end)) break;
      }
      if (skip_op("(")) {
        fail("nested tuple targets are not supported");
      }
      std::string name = expect_name();
      if (name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None")
        fail("can't assign to literal '" + name + "'");
      s.targets.push_back(name);
    }
  }

  StmtPtr parse_for(StmtPtr s) {
    s->kind = StmtKind::kFor;
    parse_targets(*s, {"in"});
    if (!skip_name("in")) fail("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"});
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail("recursive loops are not supported");
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"}, false);
    --loop_depth_;
    std::string which = cur().value;
    advance();
    if (which == "else") s->else_body = parse_body({"endfor"}, true);
    return s;
  }

  StmtPtr parse_set(StmtPtr s) {
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == ".") {
      s->targets.push_back(expect_name());
      advance();
      s->attr = expect_name();
    } else {
      parse_targets(*s, {});
    }
    if (skip_op("=")) {
      s->kind = StmtKind::kSet;
      s->expr = parse_tuple(false, true, {});
      return s;
    }
    if (!s->attr.empty() || s->targets_are_tuple) fail("block set needs a single name");
    s->kind = StmtKind::kSetBlock;
    if (is_op("|")) parse_filter_chain(s->filters, true);
    s->body = parse_body({"endset"}, true);
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression(true);
      else if (!m.params.empty() && m.params.back().second) fail("non-default argument follows default argument");
      m.params.emplace_back(std::move(name), std::move(def));
    }
    expect_op(")");
  }

  StmtPtr parse_macro(StmtPtr s) {
    s->kind = StmtKind::kMacro;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = expect_name();
    parse_signature(*s->macro);
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    s->macro->body = parse_body({"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    scan_special_names(*s->macro);
    return s;
  }

  StmtPtr parse_call_block(StmtPtr s) {
    s->kind = StmtKind::kCallBlock;
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    if (is_op("(")) parse_signature(*s->macro);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail_at(s->expr->pos, "expected call");
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    s->macro->body = parse_body({"endcall"}, true);
    loop_depth_ = saved_loop_depth;
    scan_special_names(*s->macro);
    return s;
  }

  StmtPtr parse_with(StmtPtr s) {
    s->kind = StmtKind::kWith;
    while (!(cur().type == TokenType::kBlockEnd)) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name());
      expect_op("=");
      s->values.push_back(parse_expression(true));
    }
    s->body = parse_body({"endwith"}, true);
    return s;
  }

  // jinja2 decides whether a macro accepts extra arguments by whether its body mentions
  // `varargs`/`kwargs`/`caller`.
  static void scan_expr(const Expr* e, MacroDef& m) {
    if (!e) return;
    if (e->kind == ExprKind::kName) {
      if (e->name == "caller") m.uses_caller = true;
      if (e->name == "varargs") m.uses_varargs = true;
      if (e->name == "kwargs") m.uses_kwargs = true;
    }
    scan_expr(e->a.get(), m);
    scan_expr(e->b.get(), m);
    scan_expr(e->c.get(), m);
    for (const auto& i : e->items) scan_expr(i.get(), m);
    for (const auto& k : e->kwargs) scan_expr(k.second.get(), m);
  }
  static void scan_stmts(const StmtList& list, MacroDef& m) {
    for (const auto& s : list) {
      scan_expr(s->expr.get(), m);
      scan_expr(s->cond.get(), m);
      for (const auto& b : s->branches) {
        scan_expr(b.first.get(), m);
        scan_stmts(b.second, m);
      }
      scan_stmts(s->body, m);
      scan_stmts(s->else_body, m);
      for (const auto& f : s->filters) scan_expr(f.get(), m);
      for (const auto& v : s->values) scan_expr(v.get(), m);
      if (s->macro && s->kind == StmtKind::kCallBlock) scan_stmts(s->macro->body, m);
      if (s->macro) for (const auto& p : s->macro->params) scan_expr(p.second.get(), m);
    }
  }
  static void scan_special_names(MacroDef& m) { scan_stmts(m.body, m); }

  // ---- expressions ----
  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().type == TokenType::kVariableEnd || cur().type == TokenType::kBlockEnd || is_op(")")) return true;
    return at_end_token(extra_end);
  }

  ExprPtr parse_tuple(bool explicit_parens, bool with_condexpr, std::initializer_list<const char*> extra_end) {
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

  ExprPtr parse_expression(bool with_condexpr) {
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

  ExprPtr parse_or() {
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

  ExprPtr parse_and() {
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

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = node(ExprKind::kNot, cur().pos);
      advance();
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr binary(const std::string& op, uint32_t pos, ExprPtr left, ExprPtr right) {
    auto e = node(ExprKind::kBinary, pos);
    e->name = op;
    e->a = std::move(left);
    e->b = std::move(right);
    return e;
  }

  ExprPtr parse_math1() {
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

  ExprPtr parse_concat() {
    uint32_t pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::kConcat, pos);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
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

  ExprPtr parse_pow() {
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

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr e) {
    ChainGuard chain(*this);
    while (true) {
      chain.step();
      if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj) {
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

  ExprPtr parse_subscribed() {
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

  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard guard(*this);
    auto e = node(ExprKind::kCall, callee->pos);  // errors point at the callee, not at "("
    e->a = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr operand) {
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

  void check_filter(const Expr& e) const {
    if (!is_known_filter(e.name)) fail_at(e.pos, "no filter named '" + e.name + "' (unknown or unsupported)");
  }

  // `{% filter a|b(x) %}` and `{% set x | a %}`: a chain of filters without an operand.
  void parse_filter_chain(std::vector<ExprPtr>& out, bool starts_with_pipe = false) {
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

  ExprPtr parse_test(ExprPtr operand) {
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

  const std::string& src_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse_template(const std::string& source) {
  Template t;
  t.source = normalize_template_source(source);
  Parser parser(t.source, tokenize_template(t.source));
  t.body = parser.parse_all();
  return t;
}

}  // namespace pagellm::jinja
