#include "tokenizer/jinja_parser.h"

#include <initializer_list>

#include "tokenizer/jinja_expression_parser.h"

namespace pagellm::jinja {

namespace {

// Statements: {% if %}, {% for %}, {% set %}, {% macro %}, ... and the template body.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  StmtList parse_all() {
    StmtList body = subparse({});
    if (cur().type != TokenType::kEof) fail("unexpected token");
    return body;
  }

 private:
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
