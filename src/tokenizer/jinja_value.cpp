#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/jinja_string.h"

namespace pagellm::jinja {

namespace {

// Nested values deeper than this are refused, so printing and conversion cannot exhaust the stack.
constexpr int kMaxValueDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxValueDepth)
    throw TemplateError("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

void repr_into(const Value& v, std::string& out, int depth);

void sequence_repr(const List& list, std::string& out, int depth) {
  if (list.is_generator()) throw TemplateError("unsupported: printing a generator object (Python prints its address)");
  if (!list.repr_override.empty()) {
    out += list.repr_override;
    return;
  }
  const char* prefix = "";
  const char* suffix = "";
  switch (list.style) {
    case List::Style::kDictItems: prefix = "dict_items("; suffix = ")"; break;
    case List::Style::kDictKeys: prefix = "dict_keys("; suffix = ")"; break;
    case List::Style::kDictValues: prefix = "dict_values("; suffix = ")"; break;
    default: break;
  }
  out += prefix;
  out += list.is_tuple() ? '(' : '[';
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i) out += ", ";
    repr_into(list.items[i], out, depth + 1);
  }
  if (list.is_tuple() && list.items.size() == 1) out += ',';
  out += list.is_tuple() ? ')' : ']';
  out += suffix;
}

void dict_repr(const Dict& dict, std::string& out, int depth) {
  out += '{';
  for (size_t i = 0; i < dict.entries.size(); ++i) {
    if (i) out += ", ";
    repr_into(dict.entries[i].first, out, depth + 1);
    out += ": ";
    repr_into(dict.entries[i].second, out, depth + 1);
  }
  out += '}';
}

void repr_into(const Value& v, std::string& out, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::kUndefined: out += "Undefined"; return;
    case Value::Kind::kString: out += python_string_repr(v.as_string()); return;
    case Value::Kind::kList: sequence_repr(v.as_list(), out, depth); return;
    case Value::Kind::kDict: dict_repr(v.as_dict(), out, depth); return;
    case Value::Kind::kNamespace:
      out += "<Namespace ";
      dict_repr(v.as_namespace().attrs, out, depth);
      out += '>';
      return;
    default: out += v.str(); return;
  }
}

}  // namespace

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->style = is_tuple ? List::Style::kTuple : List::Style::kList;
  return Value(ListPtr(std::move(l)));
}

Value make_list(std::vector<Value> items) { return Value::list(std::move(items)); }
Value make_generator(std::vector<Value> items) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->style = List::Style::kGenerator;
  return Value(ListPtr(std::move(l)));
}
Value make_dict(Dict dict) { return Value(DictPtr(std::make_shared<Dict>(std::move(dict)))); }
Value make_callable(std::string name, std::function<Value(const CallArgs&)> fn) {
  return Value(CallablePtr(std::make_shared<Callable>(Callable{std::move(name), std::move(fn)})));
}

double Value::to_double() const {
  if (is_float()) return as_float();
  return static_cast<double>(to_int());
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return as_list().is_generator() || !as_list().items.empty();
    case Kind::kDict: return !as_dict().entries.empty();
    default: return true;
  }
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return python_float_repr(as_float());
    case Kind::kString: return as_string();
    case Kind::kCallable:
      // CPython prints an object address here, which no test could match.
      throw TemplateError("printing the function '" + as_callable().name + "' is not supported");
    default: {
      std::string out;
      repr_into(*this, out, 0);
      return out;
    }
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(*this, out, 0);
  return out;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return as_list().is_tuple() ? "tuple" : as_list().is_generator() ? "generator" : "list";
    case Kind::kDict: return "dict";
    case Kind::kCallable: return "function";
    case Kind::kNamespace: return "Namespace";
  }
  return "object";
}

Value Value::from_json(const nlohmann::ordered_json& json, int depth) {
  check_depth(depth);
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) throw TemplateError("integer " + std::to_string(u) + " is too large");
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const auto& s = json.get_ref<const std::string&>();
      if (!is_valid_utf8(s)) throw TemplateError("input string is not valid UTF-8");
      return Value(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      dict.entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        if (!is_valid_utf8(key)) throw TemplateError("input string is not valid UTF-8");
        dict.entries.emplace_back(Value(key), from_json(item, depth + 1));
      }
      return make_dict(std::move(dict));
    }
    default: throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (values_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t position, const std::string& name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  if (position < positional.size()) return &positional[position];
  return nullptr;
}

bool values_equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.to_int() == b.to_int();
    return a.to_double() == b.to_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined: case K::kNone: return true;
    case K::kString: return a.as_string() == b.as_string();
    case K::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_generator() || y.is_generator()) return &x == &y;
      if (x.is_tuple() != y.is_tuple() || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!values_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case K::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    case K::kCallable: return &a.as_callable() == &b.as_callable();
    case K::kNamespace: return &a.as_namespace() == &b.as_namespace();
    default: return false;
  }
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined())
    throw TemplateError(a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  if (a.is_number() && b.is_number()) {
    if (!a.is_float() && !b.is_float()) return a.to_int() < b.to_int();
    return a.to_double() < b.to_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order == code point order
  if (a.is_list() && b.is_list() && a.as_list().is_tuple() == b.as_list().is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw TemplateError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                      b.type_name() + "'");
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+20": shortest round-trip digits
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (exponent < 0) return out + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= int_len) return out + digits + std::string(int_len - digits.size(), '0') + ".0";
  return out + digits.substr(0, int_len) + "." + digits.substr(int_len);
}

std::string python_string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F || py_is_printable(c)) {
      utf8_append(out, c);
    } else {
      if (c <= 0xFF) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xFFFF) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

namespace {

void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (char32_t c : utf8_decode(s)) {
    char buf[16];
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (static_cast<unsigned>(v) >> 10),
                      0xDC00 + (static_cast<unsigned>(v) & 0x3FF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.as_string();
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kNone: return "null";
    case Value::Kind::kInt: return std::to_string(key.as_int());
    case Value::Kind::kFloat: return json_float(key.as_float());
    default: throw TemplateError("keys must be str, int, float, bool or None, not " + key.type_name());
  }
}

void json_into(const Value& v, const JsonDumpOptions& o, int level, std::string& out) {
  check_depth(level);
  std::string newline_indent;
  bool pretty = o.indent >= 0 || o.indent_is_string;
  auto indent_for = [&](int lvl) {
    std::string s = "\n";
    for (int i = 0; i < lvl; ++i) s += o.indent_is_string ? o.indent_str : std::string(static_cast<size_t>(std::max(o.indent, 0)), ' ');
    return s;
  };
  switch (v.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: out += json_float(v.as_float()); return;
    case Value::Kind::kString: json_string(v.as_string(), o.ensure_ascii, out); return;
    case Value::Kind::kList: {
      if (v.as_list().is_generator()) throw TemplateError("Object of type generator is not JSON serializable");
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) out += indent_for(level + 1);
        json_into(items[i], o, level + 1, out);
      }
      if (pretty) out += indent_for(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, item] : v.as_dict().entries) entries.emplace_back(json_key(k), &item);
      if (entries.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += o.item_separator;
        if (pretty) out += indent_for(level + 1);
        json_string(entries[i].first, o.ensure_ascii, out);
        out += o.key_separator;
        json_into(*entries[i].second, o, level + 1, out);
      }
      if (pretty) out += indent_for(level);
      out += '}';
      return;
    }
    default:
      throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  json_into(value, options, 0, out);
  return out;
}

}  // namespace pagellm::jinja
