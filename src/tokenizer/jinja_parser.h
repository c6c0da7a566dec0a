// Parser: tokens -> AST, following jinja2 3.1's grammar and operator precedence
// (condexpr < or < and < not < compare < +,- < ~ < *,/,//,% < ** < unary < postfix/filters/tests).
// Constructs this interpreter does not implement (extends, include, import, recursive loops, ...)
// are rejected here with their position, never rendered differently.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // items
  kTuple,      // items
  kDict,       // items: key0, value0, key1, value1, ...
  kGetAttr,    // a.name
  kGetItem,    // a[b]
  kSlice,      // a:b:c inside [], each optional (index of a kGetItem)
  kCall,       // a(items..., kwargs...)
  kFilter,     // a | name(items..., kwargs...); a is null inside {% filter %} / {% set x | f %}
  kTest,       // a is name(items..., kwargs...)
  kNot,        // not a
  kNeg,        // -a
  kPos,        // +a
  kBinary,     // a name b, name in + - * / // % **
  kCompare,    // a ops[0] items[0] ops[1] items[1] ...
  kAnd,        // a and b
  kOr,         // a or b
  kConcat,     // items joined with ~
  kCondExpr,   // b if a else c (c may be null)
};

struct Expr {
  ExprKind kind;
  uint32_t pos = 0;  // byte offset into the normalized source
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond, body); else_body
  kFor,          // targets in expr [if cond] body [else else_body]
  kSet,          // targets = expr, or namespace_name.attr = expr
  kSetBlock,     // {% set targets[0] | filters %} body {% endset %}
  kMacro,        // macro definition
  kCallBlock,    // {% call(params) expr %} body {% endcall %}
  kFilterBlock,  // {% filter filters %} body {% endfilter %}
  kWith,         // {% with targets = values %} body
  kScope,        // body rendered as is ({% generation %} from transformers)
  kBreak,
  kContinue,
};

struct MacroDef {
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  StmtList body;
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

struct Stmt {
  StmtKind kind;
  uint32_t pos = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
  std::vector<std::string> targets;
  bool targets_are_tuple = false;
  std::string attr;                        // kSet on a namespace: targets[0].attr
  std::vector<ExprPtr> filters;            // kSetBlock / kFilterBlock, applied in order
  std::vector<ExprPtr> values;             // kWith
  std::shared_ptr<MacroDef> macro;         // kMacro, kCallBlock (the caller)
};

struct Template {
  std::string source;  // normalized source, for error positions
  StmtList body;
};

// Throws TemplateError with line and column.
Template parse_template(const std::string& source);

}  // namespace pagellm::jinja
