// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...), Python semantics.
#include <unordered_set>

#include "tokenizer/jinja_access.h"
#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_operators.h"

namespace pagellm::jinja {

namespace {

const std::unordered_set<std::string>& test_names() {
  static const std::unordered_set<std::string> kNames = {
      "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string",
      "mapping", "iterable", "sequence", "callable", "sameas", "lower", "upper", "odd", "even",
      "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
      "greaterthan", ">", "ge", ">=", "in", "filter", "test"};
  return kNames;
}

}  // namespace

bool is_known_test(const std::string& name) { return test_names().count(name) > 0; }

bool apply_test(const std::string& name, const Value& v, const CallArgs& call) {
  static const std::vector<std::string> kNoArgs, kOther = {"other"}, kNum = {"num"}, kSeq = {"seq"};
  const bool compares = name == "eq" || name == "equalto" || name == "==" || name == "ne" || name == "!=" ||
                        name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" ||
                        name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=" ||
                        name == "sameas";
  check_call(name, compares ? kOther : name == "divisibleby" ? kNum : name == "in" ? kSeq : kNoArgs, call);
  const Value* arg = call.get(0, compares ? "other" : name == "divisibleby" ? "num" : "seq");
  auto need_arg = [&]() -> const Value& {
    if (!arg) throw TemplateError("test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && !v.as_list().is_generator());
  if (name == "callable") return v.is_callable() || v.is_undefined();
  if (name == "sameas") {
    const Value& other = need_arg();
    if (v.is_none() || v.is_bool() || other.is_none() || other.is_bool()) return v.kind() == other.kind() && values_equal(v, other);
    throw TemplateError("unsupported: 'sameas' test on objects other than None, True and False");
  }
  if (name == "lower" || name == "upper") {
    std::string s = v.str();
    return get_attr(Value(s), name == "lower" ? "islower" : "isupper").as_callable().fn(CallArgs{}).as_bool();
  }
  if (name == "odd" || name == "even") {
    Value r = binary_op("%", v, Value(int64_t{2}));
    return values_equal(r, Value(int64_t{name == "odd" ? 1 : 0}));
  }
  if (name == "divisibleby") return values_equal(binary_op("%", v, need_arg()), Value(int64_t{0}));
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, need_arg());
  if (name == "ne" || name == "!=") return !values_equal(v, need_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return value_less(v, need_arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return value_less(need_arg(), v);
  if (name == "le" || name == "<=") return !value_less(need_arg(), v);
  if (name == "ge" || name == ">=") return !value_less(v, need_arg());
  if (name == "in") return contains(need_arg(), v);
  if (name == "filter") return v.is_string() && is_known_filter(v.as_string());
  if (name == "test") return v.is_string() && is_known_test(v.as_string());
  throw TemplateError("unsupported test '" + name + "'");
}

}  // namespace pagellm::jinja
