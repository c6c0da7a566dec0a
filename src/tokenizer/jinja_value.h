// Value: the dynamic type of the chat-template interpreter, modelled on the Python objects that
// jinja2 sees when transformers renders a chat template (None, bool, int, float, str, list, tuple,
// dict, jinja2's Undefined, Namespace and callables). Printing and comparing follow Python so that
// rendered prompts match jinja2 byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::jinja {

// A template error carries the 1-based position of the construct that failed; 0 means "not yet
// known" and is filled in by the nearest enclosing node the interpreter is evaluating.
class TemplateError : public std::runtime_error {
 public:
  TemplateError(const std::string& message, int line = 0, int col = 0)
      : std::runtime_error(message), line(line), col(col) {}
  int line;
  int col;
};

class Value;
struct List;
struct Dict;
struct Callable;
struct Namespace;
using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<const Dict>;
using CallablePtr = std::shared_ptr<const Callable>;
using NamespacePtr = std::shared_ptr<Namespace>;

// jinja2's default Undefined: prints as "", iterates as empty, fails on arithmetic and attribute
// access. `hint` is the message used when it fails ("'x' is undefined").
struct Undefined {
  std::string hint;
};
struct None {};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable, kNamespace };

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t{i}) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(ListPtr l) : v_(std::move(l)) {}
  Value(DictPtr d) : v_(std::move(d)) {}
  Value(CallablePtr c) : v_(std::move(c)) {}
  Value(NamespacePtr n) : v_(std::move(n)) {}
  static Value undefined(std::string hint) { Value v; v.v_ = Undefined{std::move(hint)}; return v; }
  static Value list(std::vector<Value> items, bool is_tuple = false);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_callable() const { return kind() == Kind::kCallable; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<ListPtr>(v_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(v_); }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(v_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(v_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(v_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  // Int or bool (or float) widened to double, for arithmetic that mixes them.
  double to_double() const;
  // Int or bool as int64; only valid when is_int() || is_bool().
  int64_t to_int() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }

  bool truthy() const;
  // Python str(value); jinja2 prints Undefined as "".
  std::string str() const;
  // Python repr(value), used for the items of printed lists and dicts.
  std::string repr() const;
  // Python's type name, for error messages ("'dict object' has no attribute 'x'").
  std::string type_name() const;

  static Value from_json(const nlohmann::ordered_json& json, int depth = 0);

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, CallablePtr,
               NamespacePtr>
      v_;
};

struct List {
  // How Python would print this sequence: a list "[..]", a tuple "(..)", or a dict view
  // ("dict_items([..])") returned by dict.items()/keys()/values(), or a lazy iterator
  // (generator) as filters like map/select/items return: it iterates but has no len(), no
  // indexing, is always truthy and cannot be printed reproducibly.
  enum class Style { kList, kTuple, kDictItems, kDictKeys, kDictValues, kGenerator };
  std::vector<Value> items;
  Style style = Style::kList;
  std::string repr_override;  // e.g. "range(0, 3)": what Python prints for a range object
  bool is_tuple() const { return style == Style::kTuple; }
  bool is_generator() const { return style == Style::kGenerator; }
};

// Insertion-ordered like a Python dict. Lookup is linear: template dicts are small.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // Argument `name` given by keyword or at `position`; nullptr when absent.
  const Value* get(size_t position, const std::string& name) const;
};

struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> fn;
};

// jinja2's namespace(): the only mutable object a template can modify (`set ns.x = ...`).
struct Namespace {
  Dict attrs;
};

// Python semantics helpers.
bool values_equal(const Value& a, const Value& b);
// Python `<` ordering; throws TemplateError for types Python refuses to order.
bool value_less(const Value& a, const Value& b);
// Python float repr: shortest round-trip digits, "1.0", "1e+16", "1e-05", "inf", "nan".
std::string python_float_repr(double d);
// Python repr of a str: quotes and escapes as CPython does.
std::string python_string_repr(const std::string& s);

struct JsonDumpOptions {
  int indent = -1;  // < 0: single line
  std::string indent_str;  // used when indent is given as a string
  bool indent_is_string = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python json.dumps(value, ...) of a template value.
std::string json_dumps(const Value& value, const JsonDumpOptions& options);

Value make_list(std::vector<Value> items);
Value make_generator(std::vector<Value> items);
Value make_dict(Dict dict);
Value make_callable(std::string name, std::function<Value(const CallArgs&)> fn);

}  // namespace pagellm::jinja
