#include "tokenizer/jinja_access.h"

#include <algorithm>

#include "tokenizer/jinja_string.h"

namespace pagellm::jinja {

namespace {

std::string object_type_repr(const Value& obj) {
  if (obj.is_none()) return "None";
  return obj.type_name() + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value unsafe_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                          "' object is unsafe.");
}

[[noreturn]] void unsupported_method(const Value& obj, const std::string& name) {
  throw TemplateError("unsupported: method '" + name + "' of '" + obj.type_name() + "' objects");
}

const std::string& arg_string(const CallArgs& args, size_t i, const std::string& name, const char* method) {
  const Value* v = args.get(i, name);
  if (v == nullptr) throw TemplateError(std::string(method) + "() missing required argument '" + name + "'");
  if (!v->is_string()) throw TemplateError(std::string(method) + "() argument must be str, not " + v->type_name());
  return v->as_string();
}

// Optional argument that may be None: returns nullptr for absent or None.
const Value* optional_arg(const CallArgs& args, size_t i, const std::string& name) {
  const Value* v = args.get(i, name);
  return (v == nullptr || v->is_none()) ? nullptr : v;
}

void no_range_args(const CallArgs& args, size_t from, const char* method) {
  if (args.positional.size() > from) throw TemplateError(std::string("unsupported: start/end arguments of str.") + method + "()");
}

Value strings_to_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return make_list(std::move(items));
}

// str.format with "{}", "{0}" and "{name}" fields and no format specs.
std::string py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        throw TemplateError("unsupported: format spec or conversion in str.format field '{" + field + "}'");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t k = field.size() > 9 ? SIZE_MAX : std::stoul(field);
        v = k < args.positional.size() ? &args.positional[k] : nullptr;
      } else {
        for (const auto& [key, val] : args.keyword)
          if (key == field) v = &val;
      }
      if (v == nullptr) throw TemplateError("str.format: no value for field '{" + field + "}'");
      out += v->str();
      i = close;
    } else if (c == '}') {
      throw TemplateError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

bool affix_matches(const std::string& s, const Value& affix, bool prefix, const char* method) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw TemplateError(std::string(method) + " first arg must be str or a tuple of str, not " + a.type_name());
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list() && affix.as_list().is_tuple()) {
    for (const auto& a : affix.as_list().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

// CPython's argument rules for str methods: how many positional arguments each takes, and
// whether it accepts keywords at all (most are positional-only).
void check_str_args(const std::string& name, const CallArgs& a) {
  struct Rule {
    const char* name;
    size_t max_positional;
    bool keywords;
  };
  static const Rule kRules[] = {
      {"startswith", 3, false}, {"endswith", 3, false}, {"strip", 1, false}, {"lstrip", 1, false},
      {"rstrip", 1, false}, {"split", 2, true}, {"rsplit", 2, true}, {"splitlines", 1, true},
      {"replace", 3, false}, {"upper", 0, false}, {"lower", 0, false}, {"title", 0, false},
      {"capitalize", 0, false}, {"find", 3, false}, {"rfind", 3, false}, {"index", 3, false},
      {"rindex", 3, false}, {"count", 3, false}, {"join", 1, false}, {"removeprefix", 1, false},
      {"removesuffix", 1, false}, {"isdigit", 0, false}, {"isalpha", 0, false}, {"isalnum", 0, false},
      {"isspace", 0, false}, {"isdecimal", 0, false}, {"isnumeric", 0, false}, {"islower", 0, false},
      {"isupper", 0, false}};
  for (const Rule& r : kRules) {
    if (name != r.name) continue;
    if (!r.keywords && !a.keyword.empty()) throw TemplateError("str." + name + "() takes no keyword arguments");
    if (a.positional.size() > r.max_positional)
      throw TemplateError("str." + name + "() takes at most " + std::to_string(r.max_positional) + " argument(s) (" +
                          std::to_string(a.positional.size()) + " given)");
    if (r.keywords) {
      for (const auto& [k, v] : a.keyword) {
        bool known = name == "splitlines" ? k == "keepends" : (k == "sep" || k == "maxsplit");
        if (!known) throw TemplateError("str." + name + "() got an unexpected keyword argument '" + k + "'");
      }
    }
  }
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](std::function<Value(const CallArgs&)> fn) {
    return make_callable("str." + name, [name, fn = std::move(fn)](const CallArgs& a) {
      check_str_args(name, a);
      return fn(a);
    });
  };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return bind([s, prefix](const CallArgs& a) {
      no_range_args(a, 1, prefix ? "startswith" : "endswith");
      const Value* affix = a.get(0, "prefix");
      if (!affix) throw TemplateError("startswith/endswith takes at least 1 argument");
      return Value(affix_matches(s, *affix, prefix, prefix ? "startswith" : "endswith"));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return bind([s, left, right](const CallArgs& a) {
      const Value* chars = optional_arg(a, 0, "chars");
      if (chars && !chars->is_string()) throw TemplateError("strip arg must be None or str");
      return Value(py_strip(s, chars ? &chars->as_string() : nullptr, left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool from_right = name == "rsplit";
    return bind([s, from_right](const CallArgs& a) {
      const Value* sep = optional_arg(a, 0, "sep");
      const Value* maxsplit = optional_arg(a, 1, "maxsplit");
      if (sep && !sep->is_string()) throw TemplateError("must be str or None, not " + sep->type_name());
      if (sep && sep->as_string().empty()) throw TemplateError("empty separator");
      if (maxsplit && !(maxsplit->is_int() || maxsplit->is_bool())) throw TemplateError("maxsplit must be an integer");
      return strings_to_list(py_split(s, sep ? &sep->as_string() : nullptr, maxsplit ? maxsplit->to_int() : -1, from_right));
    });
  }
  if (name == "splitlines") {
    return bind([s](const CallArgs& a) {
      const Value* keep = a.get(0, "keepends");
      if (keep && !(keep->is_int() || keep->is_bool()))
        throw TemplateError("'" + keep->type_name() + "' object cannot be interpreted as an integer");
      return strings_to_list(py_splitlines(s, keep && keep->truthy()));
    });
  }
  if (name == "replace") {
    return bind([s](const CallArgs& a) {
      const std::string& old_sub = arg_string(a, 0, "old", "replace");
      const std::string& new_sub = arg_string(a, 1, "new", "replace");
      const Value* count = a.get(2, "count");
      if (count && !(count->is_int() || count->is_bool())) throw TemplateError("replace() count must be an integer");
      return Value(py_replace(s, old_sub, new_sub, count ? count->to_int() : -1));
    });
  }
  if (name == "upper") return bind([s](const CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower") return bind([s](const CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return bind([s](const CallArgs&) { return Value(py_title(s)); });
  if (name == "capitalize") return bind([s](const CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool from_right = name[0] == 'r';
    bool raises = name.find("index") != std::string::npos;
    return bind([s, from_right, raises](const CallArgs& a) {
      no_range_args(a, 1, "find");
      int64_t at = py_find(s, arg_string(a, 0, "sub", "find"), from_right);
      if (at < 0 && raises) throw TemplateError("substring not found");
      return Value(at);
    });
  }
  if (name == "count") {
    return bind([s](const CallArgs& a) {
      no_range_args(a, 1, "count");
      return Value(py_count(s, arg_string(a, 0, "sub", "count")));
    });
  }
  if (name == "join") {
    return bind([s](const CallArgs& a) {
      const Value* it = a.get(0, "iterable");
      if (!it) throw TemplateError("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*it)) {
        if (!v.is_string()) throw TemplateError("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += s;
        out += v.as_string();
        first = false;
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") return bind([s](const CallArgs& a) { return Value(py_format(s, a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return bind([s, prefix](const CallArgs& a) {
      const std::string& x = arg_string(a, 0, prefix ? "prefix" : "suffix", prefix ? "removeprefix" : "removesuffix");
      if (x.size() <= s.size()) {
        if (prefix && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()));
        if (!prefix && s.compare(s.size() - x.size(), x.size(), x) == 0) return Value(s.substr(0, s.size() - x.size()));
      }
      return Value(s);
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isdecimal" || name == "isnumeric") {
    std::string which = name;
    return bind([s, which](const CallArgs&) {
      std::u32string cps = utf8_decode(s);
      if (cps.empty()) return Value(false);
      for (char32_t c : cps) {
        bool ok = which == "isalpha" ? py_is_alpha(c)
                  : which == "isalnum" ? py_is_alnum(c)
                  : which == "isspace" ? py_is_space(c)
                                       : py_is_digit(c);
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "islower" || name == "isupper") {
    bool lower = name == "islower";
    return bind([s, lower](const CallArgs&) {
      // Python: at least one cased character and no cased character of the other case.
      bool any_cased = false;
      for (char32_t c : utf8_decode(s)) {
        std::string ch = utf8_encode(std::u32string(1, c));
        std::string up = py_upper(ch), lo = py_lower(ch);
        if (up == lo) continue;
        any_cased = true;
        if (lower ? ch != lo : ch != up) return Value(false);
      }
      return Value(any_cased);
    });
  }
  static const char* kOtherStrMethods[] = {
      "casefold", "center", "encode", "expandtabs", "format_map", "isascii", "isidentifier",
      "isprintable", "istitle", "ljust", "maketrans", "partition", "rjust", "rpartition", "swapcase",
      "translate", "zfill"};
  for (const char* m : kOtherStrMethods)
    if (name == m) unsupported_method(Value(s), name);
  return missing_attribute(Value(s), name);
}

Value dict_method(const Value& obj, const std::string& name, bool* found) {
  *found = true;
  DictPtr d = obj.dict_ptr();  // shared: template dicts are immutable
  auto bind = [&](std::function<Value(const CallArgs&)> fn) { return make_callable("dict." + name, std::move(fn)); };
  if (name == "items" || name == "keys" || name == "values") {
    List::Style style = name == "items" ? List::Style::kDictItems
                        : name == "keys" ? List::Style::kDictKeys
                                         : List::Style::kDictValues;
    return bind([d, style](const CallArgs&) {
      auto l = std::make_shared<List>();
      l->style = style;
      for (const auto& [k, v] : d->entries) {
        if (style == List::Style::kDictItems) l->items.push_back(Value::list({k, v}, true));
        else l->items.push_back(style == List::Style::kDictKeys ? k : v);
      }
      return Value(ListPtr(std::move(l)));
    });
  }
  if (name == "get") {
    return bind([d](const CallArgs& a) {
      const Value* key = a.get(0, "key");
      if (!key) throw TemplateError("get expected at least 1 argument, got 0");
      const Value* v = d->find(*key);
      if (v) return *v;
      const Value* def = a.get(1, "default");
      return def ? *def : Value(None{});
    });
  }
  if (name == "copy") return bind([d](const CallArgs&) { return Value(DictPtr(d)); });
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return unsafe_attribute(obj, name);
  if (name == "fromkeys") unsupported_method(obj, name);
  *found = false;
  return Value();
}

Value list_method(const Value& obj, const std::string& name) {
  if (obj.as_list().is_generator()) return missing_attribute(obj, name);
  ListPtr l = obj.list_ptr();
  auto bind = [&](std::function<Value(const CallArgs&)> fn) { return make_callable("list." + name, std::move(fn)); };
  if (name == "count") {
    return bind([l](const CallArgs& a) {
      const Value* x = a.get(0, "value");
      if (!x) throw TemplateError("count() takes exactly one argument");
      return Value(static_cast<int64_t>(std::count_if(l->items.begin(), l->items.end(), [&](const Value& v) { return values_equal(v, *x); })));
    });
  }
  if (name == "index") {
    return bind([l](const CallArgs& a) {
      const Value* x = a.get(0, "value");
      if (!x) throw TemplateError("index() takes at least 1 argument");
      for (size_t i = 0; i < l->items.size(); ++i)
        if (values_equal(l->items[i], *x)) return Value(static_cast<int64_t>(i));
      throw TemplateError(x->repr() + " is not in list");
    });
  }
  if (name == "copy" && !l->is_tuple()) return bind([l](const CallArgs&) { return Value::list(l->items); });
  if (!l->is_tuple() && (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
                         name == "reverse" || name == "sort" || name == "clear"))
    return unsafe_attribute(obj, name);
  return missing_attribute(obj, name);
}

}  // namespace

[[noreturn]] void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  throw TemplateError(hint.empty() ? "undefined value" : hint);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (name.size() >= 2 && name[0] == '_' && name[1] == '_') {
    // Python objects have many dunder attributes, all blocked by the sandbox; not modelled here.
    throw TemplateError("unsupported: access to attribute '" + name + "'");
  }
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      bool found = false;
      Value m = dict_method(obj, name, &found);
      if (found) return m;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attribute(obj, name);
    }
    case Value::Kind::kString: return string_method(obj.as_string(), name);
    case Value::Kind::kList: return list_method(obj, name);
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      return missing_attribute(obj, name);
    case Value::Kind::kInt: case Value::Kind::kFloat: case Value::Kind::kBool: {
      static const char* kNumberAttrs[] = {"real", "imag", "numerator", "denominator", "conjugate", "bit_length",
                                           "bit_count", "to_bytes", "from_bytes", "as_integer_ratio", "is_integer", "hex", "fromhex"};
      for (const char* a : kNumberAttrs)
        if (name == a) unsupported_method(obj, name);
      return missing_attribute(obj, name);
    }
    default: return missing_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (obj.is_list() && obj.as_list().is_generator()) return Value::undefined("'generator object' has no element " + key.repr());
      if (key.is_int() || key.is_bool()) {
        int64_t n = py_len(obj);
        int64_t i = key.to_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("'" + object_type_repr(obj) + "' has no element " + key.str());
        if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
        const std::string& s = obj.as_string();
        if (is_ascii(s)) return Value(s.substr(static_cast<size_t>(i), 1));
        return Value(utf8_encode(std::u32string(1, utf8_decode(s)[static_cast<size_t>(i)])));
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      bool found = false;
      Value m = dict_method(obj, key.as_string(), &found);
      if (found) return m;
      return missing_attribute(obj, key.as_string());
    }
    return get_attr(obj, key.as_string());
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no element " + key.repr());
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto bound = [](const Value& v, bool* present) -> int64_t {
    *present = false;
    if (v.is_none()) return 0;
    if (v.is_undefined()) fail_undefined(v);
    if (!(v.is_int() || v.is_bool())) throw TemplateError("slice indices must be integers or None or have an __index__ method");
    *present = true;
    return v.to_int();
  };
  bool has_start, has_stop, has_step;
  int64_t start = bound(start_v, &has_start), stop = bound(stop_v, &has_stop), step = bound(step_v, &has_step);
  if (!has_step) step = 1;
  if (step == 0) throw TemplateError("slice step cannot be zero");
  if ((!obj.is_list() && !obj.is_string()) || (obj.is_list() && obj.as_list().is_generator())) return Value::undefined("'" + object_type_repr(obj) + "' has no element slice");
  std::u32string text;
  int64_t n;
  if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    text = utf8_decode(obj.as_string());
    n = static_cast<int64_t>(text.size());
  }
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](int64_t v, bool present, int64_t def) {
    if (!present) return def;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  start = adjust(start, has_start, step < 0 ? n - 1 : 0);
  stop = adjust(stop, has_stop, step < 0 ? -1 : n);
  std::vector<int64_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
  if (obj.is_list()) {
    std::vector<Value> items;
    for (int64_t i : picks) items.push_back(obj.as_list().items[static_cast<size_t>(i)]);
    return Value::list(std::move(items), obj.as_list().is_tuple());
  }
  std::u32string out;
  for (int64_t i : picks) out.push_back(text[static_cast<size_t>(i)]);
  return Value(utf8_encode(out));
}

int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::kList:
      if (v.as_list().is_generator()) throw TemplateError("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.as_dict().entries.size());
    default: throw TemplateError("object of type '" + v.type_name() + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& e : v.as_dict().entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
      return chars;
    }
    default: throw TemplateError("'" + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!item.is_string()) throw TemplateError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.as_list().items)
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict: return container.as_dict().find(item) != nullptr;
    default: throw TemplateError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace pagellm::jinja
