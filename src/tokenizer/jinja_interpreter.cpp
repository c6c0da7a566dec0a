#include "tokenizer/jinja_interpreter.h"

#include <ctime>
#include <memory>

#include "tokenizer/jinja_access.h"
#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_operators.h"

namespace pagellm::jinja {

namespace {

// Sandbox limit on range() length, as jinja2's SandboxedEnvironment (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  explicit Scope(ScopePtr parent) : parent(std::move(parent)) {}
  ScopePtr parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(name, std::move(value));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Template& tmpl, const RenderLimits& limits) : tmpl_(tmpl), limits_(limits) {}

  ~Interpreter() {
    // Namespaces are the only mutable objects; clearing them breaks any reference cycle a
    // template built (`set ns.self = ns`) so nothing leaks.
    for (auto& ns : namespaces_) ns->attrs.entries.clear();
  }

  std::string render(const std::vector<std::pair<std::string, Value>>& variables) {
    auto globals = std::make_shared<Scope>(nullptr);
    add_globals(*globals);
    auto context = std::make_shared<Scope>(globals);
    for (const auto& [k, v] : variables) context->set(k, v);
    std::string out;
    out_ = &out;
    exec_list(tmpl_.body, context);
    return out;
  }

 private:
  // ---- errors ----
  void annotate(TemplateError& err, uint32_t pos) const {
    if (err.line == 0) position_to_line_col(tmpl_.source, pos, &err.line, &err.col);
  }

  void count_step() {
    if (++steps_ > limits_.max_steps) throw TemplateError("template exceeded the step limit (" + std::to_string(limits_.max_steps) + ")");
  }

  void write(const std::string& s) {
    out_->append(s);
    if (static_cast<int64_t>(out_->size()) > limits_.max_output_bytes) throw TemplateError("rendered output is too large");
  }

  // ---- globals ----
  void add_globals(Scope& g) {
    g.set("range", make_callable("range", [](const CallArgs& a) { return range(a); }));
    g.set("namespace", make_callable("namespace", [this](const CallArgs& a) {
      auto ns = std::make_shared<Namespace>();
      for (const Value& p : a.positional) merge_mapping(ns->attrs, p);
      for (const auto& [k, v] : a.keyword) ns->attrs.set(Value(k), v);
      namespaces_.push_back(ns);
      return Value(ns);
    }));
    g.set("dict", make_callable("dict", [](const CallArgs& a) {
      Dict d;
      for (const Value& p : a.positional) merge_mapping(d, p);
      for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
      return make_dict(std::move(d));
    }));
    g.set("raise_exception", make_callable("raise_exception", [](const CallArgs& a) -> Value {
      const Value* msg = a.get(0, "message");
      throw TemplateError(msg ? msg->str() : "");
    }));
    g.set("strftime_now", make_callable("strftime_now", [](const CallArgs& a) {
      const Value* fmt = a.get(0, "format");
      if (!fmt || !fmt->is_string()) throw TemplateError("strftime_now() needs a format string");
      std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[512];
      size_t n = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &local);
      return Value(std::string(buf, n));
    }));
    for (const char* name : {"lipsum", "cycler", "joiner"}) {
      std::string n = name;
      g.set(n, make_callable(n, [n](const CallArgs&) -> Value { throw TemplateError("unsupported: global function '" + n + "'"); }));
    }
  }

  static void merge_mapping(Dict& d, const Value& src) {
    if (src.is_dict()) {
      for (const auto& [k, v] : src.as_dict().entries) d.set(k, v);
      return;
    }
    for (const Value& pair : iterate(src)) {
      std::vector<Value> kv = iterate(pair);
      if (kv.size() != 2) throw TemplateError("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
      d.set(kv[0], kv[1]);
    }
  }

  static Value range(const CallArgs& a) {
    if (!a.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
    std::vector<int64_t> n;
    for (const Value& v : a.positional) {
      if (!(v.is_int() || v.is_bool())) throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
      n.push_back(v.to_int());
    }
    if (n.empty() || n.size() > 3) throw TemplateError("range expected 1 to 3 arguments, got " + std::to_string(n.size()));
    int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1], step = n.size() == 3 ? n[2] : 1;
    if (step == 0) throw TemplateError("range() arg 3 must not be zero");
    __int128 count = step > 0 ? (stop > start ? ((__int128)stop - start + step - 1) / step : 0)
                              : (start > stop ? ((__int128)start - stop - step - 1) / -step : 0);
    if (count > kMaxRange) throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    auto l = std::make_shared<List>();
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) l->items.emplace_back(start + i * step);
    l->repr_override = "range(" + std::to_string(start) + ", " + std::to_string(stop) +
                       (step != 1 ? ", " + std::to_string(step) : "") + ")";
    return Value(ListPtr(std::move(l)));
  }

  // ---- statements ----
  Flow exec_list(const StmtList& list, const ScopePtr& scope) {
    for (const auto& s : list) {
      Flow f = exec(*s, scope);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope) {
    try {
      return exec_inner(s, scope);
    } catch (TemplateError& err) {
      annotate(err, s.pos);
      throw;
    }
  }

  std::string capture(const StmtList& body, const ScopePtr& scope) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_list(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  Value apply_filter_chain(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
    for (const auto& f : filters) {
      try {
        v = apply_filter(f->name, v, eval_args(*f, scope));
      } catch (TemplateError& err) {
        annotate(err, f->pos);
        throw;
      }
    }
    return v;
  }

  void assign_targets(const Stmt& s, const Value& value, Scope& scope) {
    if (!s.targets_are_tuple) {
      scope.set(s.targets[0], value);
      return;
    }
    std::vector<Value> parts = iterate(value);
    if (parts.size() != s.targets.size()) {
      throw TemplateError(parts.size() > s.targets.size()
                              ? "too many values to unpack (expected " + std::to_string(s.targets.size()) + ")"
                              : "not enough values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                                    std::to_string(parts.size()) + ")");
    }
    for (size_t i = 0; i < parts.size(); ++i) scope.set(s.targets[i], parts[i]);
  }

  Flow exec_inner(const Stmt& s, const ScopePtr& scope) {
    count_step();
    switch (s.kind) {
      case StmtKind::kData: write(s.text); return Flow::kNormal;
      case StmtKind::kOutput: write(eval(*s.expr, scope).str()); return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) return exec_list(body, scope);
        return exec_list(s.else_body, scope);
      case StmtKind::kFor: return exec_for(s, scope);
      case StmtKind::kSet: {
        Value v = eval(*s.expr, scope);
        if (!s.attr.empty()) {
          const Value* ns = scope->lookup(s.targets[0]);
          if (!ns || !ns->is_namespace()) throw TemplateError("Cannot assign attribute on non-namespace object");
          ns->as_namespace().attrs.set(Value(s.attr), std::move(v));
        } else {
          assign_targets(s, v, *scope);
        }
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        Value v = apply_filter_chain(s.filters, Value(capture(s.body, scope)), scope);
        scope->set(s.targets[0], std::move(v));
        return Flow::kNormal;
      }
      case StmtKind::kMacro: scope->set(s.macro->name, make_macro(s.macro, scope)); return Flow::kNormal;
      case StmtKind::kCallBlock: {
        const Expr& call = *s.expr;
        Value callee = eval(*call.a, scope);
        CallArgs args = eval_args(call, scope);
        args.keyword.emplace_back("caller", make_macro(s.macro, scope));
        write(invoke(callee, args).str());
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: write(apply_filter_chain(s.filters, Value(capture(s.body, scope)), scope).str()); return Flow::kNormal;
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) inner->set(s.targets[i], eval(*s.values[i], scope));
        return exec_list(s.body, inner);
      }
      case StmtKind::kScope: return exec_list(s.body, scope);
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope) {
    Value iterable = eval(*s.expr, scope);
    std::vector<Value> items = iterate(iterable);
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        count_step();
        auto probe = std::make_shared<Scope>(scope);
        assign_targets(s, item, *probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_list(s.else_body, scope);
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      count_step();
      auto iter_scope = std::make_shared<Scope>(scope);
      assign_targets(s, items[static_cast<size_t>(i)], *iter_scope);
      iter_scope->set("loop", loop_object(items, i));
      Flow f = exec_list(s.body, iter_scope);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict d;
    d.entries.reserve(12);
    d.set(Value("index"), Value(i + 1));
    d.set(Value("index0"), Value(i));
    d.set(Value("revindex"), Value(n - i));
    d.set(Value("revindex0"), Value(n - i - 1));
    d.set(Value("first"), Value(i == 0));
    d.set(Value("last"), Value(i == n - 1));
    d.set(Value("length"), Value(n));
    d.set(Value("depth"), Value(int64_t{1}));
    d.set(Value("depth0"), Value(int64_t{0}));
    if (i > 0) d.set(Value("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) d.set(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
    d.set(Value("cycle"), make_callable("loop.cycle", [i](const CallArgs& a) {
      if (a.positional.empty()) throw TemplateError("no items for cycling given");
      return a.positional[static_cast<size_t>(i) % a.positional.size()];
    }));
    return make_dict(std::move(d));
  }

  // ---- macros ----
  Value make_macro(const std::shared_ptr<MacroDef>& def, const ScopePtr& scope) {
    // A weak reference: the macro usually lives in the scope it captures.
    std::weak_ptr<Scope> weak = scope;
    return make_callable(def->name, [this, def, weak](const CallArgs& args) { return call_macro(*def, weak.lock(), args); });
  }

  Value call_macro(const MacroDef& def, const ScopePtr& def_scope, const CallArgs& args) {
    if (!def_scope) throw TemplateError("unsupported: macro '" + def.name + "' called after its defining scope ended");
    if (call_depth_ >= limits_.max_call_depth) throw TemplateError("maximum macro recursion depth exceeded");
    auto local = std::make_shared<Scope>(def_scope);
    if (args.positional.size() > def.params.size() && !def.uses_varargs)
      throw TemplateError("macro '" + def.name + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
    std::vector<bool> bound(def.params.size(), false);
    for (size_t i = 0; i < def.params.size() && i < args.positional.size(); ++i) {
      local->set(def.params[i].first, args.positional[i]);
      bound[i] = true;
    }
    Dict extra_kwargs;
    Value caller = Value::undefined("No caller defined");
    for (const auto& [k, v] : args.keyword) {
      size_t idx = def.params.size();
      for (size_t i = 0; i < def.params.size(); ++i)
        if (def.params[i].first == k) idx = i;
      if (idx < def.params.size()) {
        if (bound[idx]) throw TemplateError("macro '" + def.name + "' got multiple values for argument '" + k + "'");
        local->set(k, v);
        bound[idx] = true;
      } else if (k == "caller" && def.uses_caller) {
        caller = v;
      } else if (def.uses_kwargs) {
        extra_kwargs.set(Value(k), v);
      } else {
        throw TemplateError("macro '" + def.name + "' takes no keyword argument '" + k + "'");
      }
    }
    ++call_depth_;
    struct DepthRestore {
      int& d;
      ~DepthRestore() { --d; }
    } restore{call_depth_};
    for (size_t i = 0; i < def.params.size(); ++i) {
      if (bound[i]) continue;
      const auto& [name, def_expr] = def.params[i];
      local->set(name, def_expr ? eval(*def_expr, local) : Value::undefined("parameter '" + name + "' was not provided"));
    }
    if (def.uses_caller) local->set("caller", caller);
    if (def.uses_varargs) {
      std::vector<Value> rest;
      for (size_t i = def.params.size(); i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
      local->set("varargs", Value::list(std::move(rest), true));
    }
    if (def.uses_kwargs) local->set("kwargs", make_dict(std::move(extra_kwargs)));
    return Value(capture(def.body, local));
  }

  Value invoke(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_callable()) throw TemplateError("'" + callee.type_name() + "' object is not callable");
    return callee.as_callable().fn(args);
  }

  // ---- expressions ----
  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs args;
    args.positional.reserve(e.items.size());
    for (const auto& item : e.items) args.positional.push_back(eval(*item, scope));
    for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
    return args;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    try {
      return eval_inner(e, scope);
    } catch (TemplateError& err) {
      annotate(err, e.pos);
      throw;
    }
  }

  static void check_hashable(const Value& key) {
    if (key.is_dict() || key.is_namespace() || (key.is_list() && !key.as_list().is_tuple()))
      throw TemplateError("unhashable type: '" + key.type_name() + "'");
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return values_equal(a, b);
    if (op == "!=") return !values_equal(a, b);
    if (op == "<") return value_less(a, b);
    if (op == ">") return value_less(b, a);
    if (op == "<=") return value_less(a, b) || values_equal(a, b);
    if (op == ">=") return value_less(b, a) || values_equal(a, b);
    if (op == "in") return contains(b, a);
    return !contains(b, a);  // notin
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: {
        const Value* v = scope->lookup(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.items.size());
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          Value k = eval(*e.items[i], scope);
          check_hashable(k);
          d.set(std::move(k), eval(*e.items[i + 1], scope));
        }
        return make_dict(std::move(d));
      }
      case ExprKind::kGetAttr: return get_attr(eval(*e.a, scope), e.name);
      case ExprKind::kGetItem: {
        Value obj = eval(*e.a, scope);
        if (e.b->kind == ExprKind::kSlice) {
          const Expr& sl = *e.b;
          Value start = sl.a ? eval(*sl.a, scope) : Value(None{});
          Value stop = sl.b ? eval(*sl.b, scope) : Value(None{});
          Value step = sl.c ? eval(*sl.c, scope) : Value(None{});
          return get_slice(obj, start, stop, step);
        }
        return get_item(obj, eval(*e.b, scope));
      }
      case ExprKind::kSlice: throw TemplateError("unexpected slice");
      case ExprKind::kCall: {
        Value callee = eval(*e.a, scope);
        return invoke(callee, eval_args(e, scope));
      }
      case ExprKind::kFilter: {
        Value operand = eval(*e.a, scope);
        return apply_filter(e.name, operand, eval_args(e, scope));
      }
      case ExprKind::kTest: {
        Value operand = eval(*e.a, scope);
        return Value(apply_test(e.name, operand, eval_args(e, scope)));
      }
      case ExprKind::kNot: return Value(!eval(*e.a, scope).truthy());
      case ExprKind::kNeg: return negate(eval(*e.a, scope));
      case ExprKind::kPos: return unary_plus(eval(*e.a, scope));
      case ExprKind::kBinary: {
        Value a = eval(*e.a, scope);
        Value b = eval(*e.b, scope);
        return binary_op(e.name, a, b);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.a, scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.a, scope);
        return a.truthy() ? eval(*e.b, scope) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.a, scope);
        return a.truthy() ? a : eval(*e.b, scope);
      }
      case ExprKind::kConcat: {
        std::string s;
        for (const auto& item : e.items) {
          s += eval(*item, scope).str();
          if (s.size() > kMaxValueBytes) throw TemplateError("string too large");
        }
        return Value(std::move(s));
      }
      case ExprKind::kCondExpr:
        if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
    throw TemplateError("unknown expression");
  }

  const Template& tmpl_;
  RenderLimits limits_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  std::vector<NamespacePtr> namespaces_;
};

}  // namespace

std::string render_template(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables,
                            const RenderLimits& limits) {
  Interpreter interpreter(tmpl, limits);
  return interpreter.render(variables);
}

}  // namespace pagellm::jinja
