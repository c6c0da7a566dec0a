// Attribute and item access with jinja2's sandboxed semantics: `a.b` tries the Python attribute
// (a str/dict/list method, bound to its object) and falls back to `a['b']`; `a[k]` tries the item
// and falls back to the attribute; misses give Undefined, mutating methods give an Undefined
// that fails when called (ImmutableSandboxedEnvironment), and Undefined itself fails on access.
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step]; each bound may be None (or Undefined when omitted in the source).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Python len(); throws for objects without a length.
int64_t py_len(const Value& v);
// Python iter() materialized: list items, dict keys, string code points; Undefined is empty.
std::vector<Value> iterate(const Value& v);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// Throws the error that using an Undefined raises.
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace pagellm::jinja
