// Python's binary and unary operators on template values (+ - * / // % ** and unary -/+),
// including int overflow checks: Python ints are unbounded, ours are int64, and a result that
// does not fit is an error rather than a different number.
#pragma once

#include <string>

#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

// op is one of "+", "-", "*", "/", "//", "%", "**".
Value binary_op(const std::string& op, const Value& a, const Value& b);
Value negate(const Value& a);
Value unary_plus(const Value& a);

// Strings and lists built by templates are capped so a hostile template cannot exhaust memory.
constexpr size_t kMaxValueBytes = 64u << 20;

}  // namespace pagellm::jinja
