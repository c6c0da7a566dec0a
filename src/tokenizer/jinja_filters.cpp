#include "tokenizer/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/jinja_access.h"
#include "tokenizer/jinja_operators.h"
#include "tokenizer/jinja_string.h"

namespace pagellm::jinja {

namespace {

const std::unordered_set<std::string>& filter_names() {
  static const std::unordered_set<std::string> kNames = {
      "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
      "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "reject",
      "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
      "title", "tojson", "trim", "unique", "upper", "wordcount"};
  return kNames;
}

// Parameters after the operand, as jinja2 declares each filter; filters taking *args/**kwargs
// (map, select, reject, selectattr, rejectattr) are absent and not checked here.
const std::unordered_map<std::string, std::vector<std::string>>& filter_signatures() {
  static const std::unordered_map<std::string, std::vector<std::string>> kSignatures = {
      {"abs", {}}, {"attr", {"name"}}, {"capitalize", {}}, {"count", {}}, {"length", {}},
      {"d", {"default_value", "boolean"}}, {"default", {"default_value", "boolean"}},
      {"dictsort", {"case_sensitive", "by", "reverse"}}, {"e", {}}, {"escape", {}}, {"first", {}},
      {"float", {"default"}}, {"indent", {"width", "first", "blank"}}, {"int", {"default", "base"}},
      {"items", {}}, {"join", {"d", "attribute"}}, {"last", {}}, {"list", {}}, {"lower", {}},
      {"max", {"case_sensitive", "attribute"}}, {"min", {"case_sensitive", "attribute"}},
      {"replace", {"old", "new", "count"}}, {"reverse", {}}, {"round", {"precision", "method"}},
      {"safe", {}}, {"sort", {"reverse", "case_sensitive", "attribute"}}, {"string", {}},
      {"sum", {"attribute", "start"}}, {"title", {}}, {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
      {"trim", {"chars"}}, {"unique", {"case_sensitive", "attribute"}}, {"upper", {}}, {"wordcount", {}}};
  return kSignatures;
}

// Python's checks when calling a function: too many positional arguments, unknown keywords,
// and a parameter given twice all raise TypeError.
void check_call_impl(const std::string& name, const std::vector<std::string>& params, const CallArgs& call) {
  if (call.positional.size() > params.size())
    throw TemplateError(name + "() takes " + std::to_string(params.size() + 1) + " positional argument(s) but " +
                        std::to_string(call.positional.size() + 1) + " were given");
  for (const auto& [key, value] : call.keyword) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) throw TemplateError(name + "() got an unexpected keyword argument '" + key + "'");
    if (static_cast<size_t>(it - params.begin()) < call.positional.size())
      throw TemplateError(name + "() got multiple values for argument '" + key + "'");
  }
}

// Arguments after the operand, by position or keyword.
struct Args {
  const CallArgs& call;
  const char* filter;
  const Value* get(size_t i, const char* name) const { return call.get(i, name); }
  Value get_or(size_t i, const char* name, Value def) const {
    const Value* v = call.get(i, name);
    return v ? *v : def;
  }
  bool flag(size_t i, const char* name, bool def) const {
    const Value* v = call.get(i, name);
    return v ? v->truthy() : def;
  }
  void max_positional(size_t n) const {
    if (call.positional.size() > n)
      throw TemplateError(std::string("filter '") + filter + "' takes at most " + std::to_string(n) + " argument(s)");
  }
};

Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.as_string())) : v; }

// make_attrgetter: "a.b.0" looks up item by item (getitem first, then attribute).
Value lookup_attribute(const Value& item, const Value& attribute, const Value* default_value = nullptr) {
  Value cur = item;
  if (attribute.is_string()) {
    static const std::string kDot = ".";
    for (const std::string& part : py_split(attribute.as_string(), &kDot, -1, false)) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      cur = digits ? get_item(cur, Value(static_cast<int64_t>(std::strtoll(part.c_str(), nullptr, 10)))) : get_item(cur, Value(part));
      if (default_value && !default_value->is_none() && cur.is_undefined()) cur = *default_value;
    }
  } else {
    cur = get_item(cur, attribute);
    if (default_value && !default_value->is_none() && cur.is_undefined()) cur = *default_value;
  }
  return cur;
}

std::vector<Value> attribute_list(const Value& attribute) {
  // make_multi_attrgetter: "a,b" sorts by several attributes.
  std::vector<Value> attrs;
  if (attribute.is_string()) {
    std::string comma = ",";
    for (auto& a : py_split(attribute.as_string(), &comma, -1, false)) attrs.emplace_back(a);
  } else if (!attribute.is_none()) {
    attrs.push_back(attribute);
  }
  return attrs;
}

Value sort_key(const Value& item, const std::vector<Value>& attrs, bool case_sensitive) {
  if (attrs.empty()) return case_sensitive ? item : ignore_case(item);
  std::vector<Value> keys;
  for (const auto& a : attrs) {
    Value k = lookup_attribute(item, a);
    keys.push_back(case_sensitive ? k : ignore_case(k));
  }
  return keys.size() == 1 ? keys[0] : Value::list(std::move(keys));
}

// Python int(str, base): surrounding whitespace, a sign, "_" between digits, a base prefix
// (base 0 infers it). Returns false where Python raises ValueError.
bool parse_python_int(const std::string& text, int base, int64_t* out) {
  if (base != 0 && (base < 2 || base > 36)) return false;
  std::string s = py_strip(text, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(s[i + 1] | 0x20);
    int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (base == 0) {
    // No prefix: decimal, and a leading zero is only allowed for zero itself.
    base = 10;
    size_t first = s.find_first_not_of("0_", i);
    if (i < s.size() && s[i] == '0' && first != std::string::npos) return false;
  }
  unsigned __int128 value = 0;
  bool prev_underscore = true, any = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (prev_underscore) return false;
      prev_underscore = true;
      continue;
    }
    int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return false;
    value = value * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (value > static_cast<unsigned __int128>(INT64_MAX) + 1) throw TemplateError("unsupported: integer does not fit in 64 bits");
    prev_underscore = false;
    any = true;
  }
  if (!any || prev_underscore) return false;
  if (!negative && value > static_cast<unsigned __int128>(INT64_MAX)) throw TemplateError("unsupported: integer does not fit in 64 bits");
  *out = negative ? static_cast<int64_t>(-static_cast<__int128>(value)) : static_cast<int64_t>(value);
  return true;
}

// Python float(str).
bool parse_python_float(const std::string& text, double* out) {
  std::string s = py_strip(text, nullptr, true, true);
  std::string lower = py_lower(s);
  std::string body = lower;
  double sign = 1.0;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") {
    *out = sign * INFINITY;
    return true;
  }
  if (body == "nan") {
    *out = NAN;
    return true;
  }
  std::string clean;
  bool seen_digit = false, seen_dot = false, seen_exp = false;
  char prev = '\0';
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
    } else if (c == '_') {
      bool next_digit = i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '9';
      if (!(prev >= '0' && prev <= '9') || !next_digit) return false;
      prev = c;
      continue;
    } else if (c == '.' && !seen_dot && !seen_exp) {
      seen_dot = true;
    } else if (c == 'e' && seen_digit && !seen_exp) {
      seen_exp = true;
      if (i + 1 < body.size() && (body[i + 1] == '+' || body[i + 1] == '-')) {
        clean += c;
        c = body[++i];
      }
      if (i + 1 >= body.size()) return false;
    } else {
      return false;
    }
    clean += c;
    prev = c;
  }
  if (!seen_digit) return false;
  *out = sign * std::strtod(clean.c_str(), nullptr);
  return true;
}

Value to_int_filter(const Value& v, const Args& a) {
  Value def = a.get_or(0, "default", Value(int64_t{0}));
  Value base_v = a.get_or(1, "base", Value(int64_t{10}));
  int base = (base_v.is_int() && base_v.as_int() >= 0 && base_v.as_int() <= 36) ? static_cast<int>(base_v.as_int()) : -1;
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return Value(v.to_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isnan(d)) return def;
    if (std::isinf(d)) throw TemplateError("cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2e18) throw TemplateError("unsupported: integer does not fit in 64 bits");
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t out;
    if (parse_python_int(v.as_string(), base, &out)) return Value(out);
    double d;
    if (parse_python_float(v.as_string(), &d)) {
      if (std::isnan(d)) return def;
      if (std::isinf(d)) throw TemplateError("cannot convert float infinity to integer");
      if (std::fabs(d) >= 9.2e18) throw TemplateError("unsupported: integer does not fit in 64 bits");
      return Value(static_cast<int64_t>(d));
    }
  }
  return def;
}

Value round_filter(const Value& v, const Args& a) {
  Value precision_v = a.get_or(0, "precision", Value(int64_t{0}));
  Value method_v = a.get_or(1, "method", Value("common"));
  std::string method = method_v.str();
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw TemplateError("type " + v.type_name() + " doesn't define __round__ method");
  if (!precision_v.is_int()) throw TemplateError("precision must be an integer");
  int64_t precision = precision_v.as_int();
  if (method == "common") {
    if (!v.is_float()) return Value(v.to_int());
    double d = v.as_float();
    if (!std::isfinite(d)) return v;
    if (precision < 0 || precision > 300) throw TemplateError("unsupported: round precision " + std::to_string(precision));
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), d);  // correctly rounded, half-even
    return Value(std::strtod(buf, nullptr));
  }
  if (precision < 0 || precision > 18) throw TemplateError("unsupported: round precision " + std::to_string(precision));
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = v.to_double() * scale;
  double r = method == "ceil" ? std::ceil(scaled) : std::floor(scaled);
  return Value(r / scale);
}

Value tojson_filter(const Value& v, const Args& a) {
  JsonDumpOptions o;
  o.ensure_ascii = a.flag(0, "ensure_ascii", false);
  Value indent = a.get_or(1, "indent", Value(None{}));
  Value separators = a.get_or(2, "separators", Value(None{}));
  o.sort_keys = a.flag(3, "sort_keys", false);
  a.max_positional(4);
  if (indent.is_string()) {
    o.indent_is_string = true;
    o.indent_str = indent.as_string();
  } else if (indent.is_int() || indent.is_bool()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.to_int(), 0, 1 << 16));
  } else if (!indent.is_none()) {
    throw TemplateError("tojson indent must be an int, a string or None");
  }
  bool pretty = o.indent >= 0 || o.indent_is_string;
  o.item_separator = pretty ? "," : ", ";
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().items.size() != 2 || !separators.as_list().items[0].is_string() ||
        !separators.as_list().items[1].is_string())
      throw TemplateError("tojson separators must be a pair of strings");
    o.item_separator = separators.as_list().items[0].as_string();
    o.key_separator = separators.as_list().items[1].as_string();
  }
  return Value(json_dumps(v, o));
}

Value indent_filter(const Value& v, const Args& a) {
  Value width = a.get_or(0, "width", Value(int64_t{4}));
  bool first = a.flag(1, "first", false);
  bool blank = a.flag(2, "blank", false);
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) throw TemplateError("unsupported operand type(s) for +=: '" + v.type_name() + "' and 'str'");
  std::string indention = width.is_string() ? width.as_string()
                          : (width.is_int() || width.is_bool()) ? std::string(static_cast<size_t>(std::clamp<int64_t>(width.to_int(), 0, 1 << 16)), ' ')
                                                                : throw TemplateError("indent width must be an int or a string");
  std::vector<std::string> lines = py_splitlines(v.as_string() + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention) + lines[i];
  }
  return Value(first ? indention + rv : rv);
}

Value select_filter(const std::string& name, const Value& v, const CallArgs& call) {
  bool lookup_attr = name == "selectattr" || name == "rejectattr";
  bool reject = name == "reject" || name == "rejectattr";
  std::vector<Value> out;
  if (!v.truthy()) return make_generator({});
  size_t off = 0;
  Value attr;
  if (lookup_attr) {
    if (call.positional.empty()) throw TemplateError("Missing parameter for attribute name");
    attr = call.positional[0];
    off = 1;
  }
  std::string test;
  CallArgs test_args;
  bool has_test = call.positional.size() > off;
  if (has_test) {
    test_args.positional.assign(call.positional.begin() + static_cast<long>(off) + 1, call.positional.end());
    test_args.keyword = call.keyword;
  }
  for (const Value& item : iterate(v)) {
    if (has_test && test.empty()) {  // jinja2 looks the test up per item, so only when there are items
      const Value& name_v = call.positional[off];
      if (!name_v.is_string() || !is_known_test(name_v.as_string()))
        throw TemplateError("no test named " + name_v.repr() + " (unknown or unsupported)");
      test = name_v.as_string();
    }
    Value subject = lookup_attr ? lookup_attribute(item, attr) : item;
    bool ok = has_test ? apply_test(test, subject, test_args) : subject.truthy();
    if (ok != reject) out.push_back(item);
  }
  return make_generator(std::move(out));
}

Value map_filter(const Value& v, const CallArgs& call) {
  if (!v.truthy()) return make_generator({});
  std::vector<Value> out;
  if (call.positional.empty()) {
    const Value* attribute = nullptr;
    const Value* def = nullptr;
    for (const auto& [k, val] : call.keyword) {
      if (k == "attribute") attribute = &val;
      else if (k == "default") def = &val;
      else throw TemplateError("Unexpected keyword argument '" + k + "'");
    }
    if (!attribute) throw TemplateError("map requires a filter argument");
    for (const Value& item : iterate(v)) out.push_back(lookup_attribute(item, *attribute, def));
    return make_generator(std::move(out));
  }
  const Value& filter = call.positional[0];
  CallArgs rest;
  rest.positional.assign(call.positional.begin() + 1, call.positional.end());
  rest.keyword = call.keyword;
  for (const Value& item : iterate(v)) {
    // Looked up per item, as jinja2 does: an empty input never fails on the name.
    if (!filter.is_string() || !is_known_filter(filter.as_string()))
      throw TemplateError("no filter named " + filter.repr() + " (unknown or unsupported)");
    out.push_back(apply_filter(filter.as_string(), item, rest));
  }
  return make_generator(std::move(out));
}

Value aggregate(const Value& v, const Args& a, bool want_max) {
  bool case_sensitive = a.flag(0, "case_sensitive", false);
  Value attribute = a.get_or(1, "attribute", Value(None{}));
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key = [&](const Value& item) {
    Value k = attribute.is_none() ? item : lookup_attribute(item, attribute);
    return case_sensitive ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? value_less(best_key, k) : value_less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value sequence_filter(const std::string& name, const Value& v, const Args& a) {
  if (name == "first") {
    if (v.is_undefined()) return Value::undefined("No first item, sequence was empty.");
    std::vector<Value> items = iterate(v);
    return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
  }
  if (name == "last") {
    if (v.is_list() && v.as_list().is_generator()) throw TemplateError("'generator' object is not reversible");
    std::vector<Value> items = iterate(v);
    return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) return get_slice(v, Value(None{}), Value(None{}), Value(int64_t{-1}));
    if (v.is_undefined()) return make_generator({});
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    if (v.is_list() && v.as_list().is_generator()) return Value::list(std::move(items));
    return make_generator(std::move(items));  // reversed(): a list_reverseiterator
  }
  if (name == "unique") {
    bool case_sensitive = a.flag(0, "case_sensitive", false);
    Value attribute = a.get_or(1, "attribute", Value(None{}));
    std::vector<Value> seen, out;
    for (const Value& item : iterate(v)) {
      Value k = attribute.is_none() ? item : lookup_attribute(item, attribute);
      if (!case_sensitive) k = ignore_case(k);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); })) continue;
      seen.push_back(k);
      out.push_back(item);
    }
    return make_generator(std::move(out));
  }
  if (name == "sort") {
    bool reverse = a.flag(0, "reverse", false);
    bool case_sensitive = a.flag(1, "case_sensitive", false);
    std::vector<Value> attrs = attribute_list(a.get_or(2, "attribute", Value(None{})));
    std::vector<std::pair<Value, Value>> keyed;
    for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(item, attrs, case_sensitive), item);
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      return reverse ? value_less(y.first, x.first) : value_less(x.first, y.first);
    });
    std::vector<Value> out;
    for (auto& k : keyed) out.push_back(std::move(k.second));
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    bool case_sensitive = a.flag(0, "case_sensitive", false);
    std::string by = a.get_or(1, "by", Value("key")).str();
    bool reverse = a.flag(2, "reverse", false);
    if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
    if (!v.is_dict()) throw TemplateError("dictsort needs a mapping");
    std::vector<Value> pairs;
    for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value::list({k, val}, true));
    size_t pos = by == "key" ? 0 : 1;
    std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
      Value kx = x.as_list().items[pos], ky = y.as_list().items[pos];
      if (!case_sensitive) {
        kx = ignore_case(kx);
        ky = ignore_case(ky);
      }
      return reverse ? value_less(ky, kx) : value_less(kx, ky);
    });
    return Value::list(std::move(pairs));
  }
  if (name == "sum") {
    Value attribute = a.get_or(0, "attribute", Value(None{}));
    Value total = a.get_or(1, "start", Value(int64_t{0}));
    for (const Value& item : iterate(v)) {
      Value x = attribute.is_none() ? item : lookup_attribute(item, attribute);
      if (total.is_string() || x.is_string()) throw TemplateError("sum() can't sum strings");
      total = binary_op("+", total, x);
    }
    return total;
  }
  if (name == "max" || name == "min") return aggregate(v, a, name == "max");
  if (name == "join") {
    std::string sep = a.get_or(0, "d", Value("")).str();
    Value attribute = a.get_or(1, "attribute", Value(None{}));
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v)) {
      if (!first) out += sep;
      out += (attribute.is_none() ? item : lookup_attribute(item, attribute)).str();
      first = false;
      if (out.size() > kMaxValueBytes) throw TemplateError("string too large");
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return make_generator({});
    if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    std::vector<Value> pairs;
    for (const auto& [k, val] : v.as_dict().entries) pairs.push_back(Value::list({k, val}, true));
    return make_generator(std::move(pairs));
  }
  throw TemplateError("unsupported filter '" + name + "'");
}

}  // namespace

void check_call(const std::string& name, const std::vector<std::string>& params, const CallArgs& call) {
  check_call_impl(name, params, call);
}

bool is_known_filter(const std::string& name) { return filter_names().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& call) {
  if (auto sig = filter_signatures().find(name); sig != filter_signatures().end()) check_call_impl(name, sig->second, call);
  Args a{call, name.c_str()};
  if (name == "default" || name == "d") {
    Value def = a.get_or(0, "default_value", Value(""));
    bool boolean = a.flag(1, "boolean", false);
    return (v.is_undefined() || (boolean && !v.truthy())) ? def : v;
  }
  if (name == "tojson") return tojson_filter(v, a);
  if (name == "length" || name == "count") return Value(py_len(v));
  if (name == "string" || name == "safe") return Value(v.str());
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");
    if (chars && !chars->is_none() && !chars->is_string()) throw TemplateError("strip arg must be None or str");
    return Value(py_strip(v.str(), (chars && chars->is_string()) ? &chars->as_string() : nullptr, true, true));
  }
  if (name == "upper") return Value(py_upper(v.str()));
  if (name == "lower") return Value(py_lower(v.str()));
  if (name == "capitalize") return Value(py_capitalize(v.str()));
  if (name == "title") {
    // jinja2's do_title: capitalize each piece split at runs of "-", whitespace, "(", "{", "[", "<".
    std::u32string s = utf8_decode(v.str());
    std::string out;
    bool at_word_start = true;
    for (char32_t c : s) {
      bool sep = c == '-' || py_is_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
      std::string ch = utf8_encode(std::u32string(1, c));
      out += sep ? ch : at_word_start ? py_upper(ch) : py_lower(ch);
      at_word_start = sep;
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    if (v.is_undefined()) fail_undefined(v);
    Value old_v = a.get_or(0, "old", Value("")), new_v = a.get_or(1, "new", Value(""));
    Value count = a.get_or(2, "count", Value(None{}));
    if (!a.get(0, "old") || !a.get(1, "new")) throw TemplateError("replace filter needs old and new");
    if (!count.is_none() && !count.is_int()) throw TemplateError("replace count must be an integer");
    return Value(py_replace(v.str(), old_v.str(), new_v.str(), count.is_none() ? -1 : count.as_int()));
  }
  if (name == "int") return to_int_filter(v, a);
  if (name == "float") {
    Value def = a.get_or(0, "default", Value(0.0));
    if (v.is_undefined()) fail_undefined(v);
    if (v.is_number()) return Value(v.to_double());
    double d;
    if (v.is_string() && parse_python_float(v.as_string(), &d)) return Value(d);
    return def;
  }
  if (name == "abs") {
    if (v.is_undefined()) fail_undefined(v);
    if (v.is_int() || v.is_bool()) {
      if (v.to_int() == INT64_MIN) throw TemplateError("unsupported: integer does not fit in 64 bits");
      return Value(v.to_int() < 0 ? -v.to_int() : v.to_int());
    }
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "round") return round_filter(v, a);
  if (name == "indent") return indent_filter(v, a);
  if (name == "wordcount") {
    int64_t words = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(v.str())) {
      bool w = c == '_' || py_is_alnum(c);
      if (w && !in_word) ++words;
      in_word = w;
    }
    return Value(words);
  }
  if (name == "escape" || name == "e") return Value(html_escape(v.str()));
  if (name == "attr") {
    const Value* attr_name = a.get(0, "name");
    if (!attr_name || !attr_name->is_string()) throw TemplateError("attr filter needs a name");
    return get_attr(v, attr_name->as_string());
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") return select_filter(name, v, call);
  if (name == "map") return map_filter(v, call);
  return sequence_filter(name, v, a);
}


}  // namespace pagellm::jinja
