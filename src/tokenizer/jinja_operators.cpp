#include "tokenizer/jinja_operators.h"

#include <cmath>

#include "tokenizer/jinja_access.h"

namespace pagellm::jinja {

namespace {

[[noreturn]] void unsupported_operands(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

[[noreturn]] void overflow() {
  throw TemplateError("unsupported: integer result does not fit in 64 bits (Python ints are unbounded)");
}

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }

Value repeat(const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.as_list().is_tuple());
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (s.size() * static_cast<unsigned __int128>(times) > kMaxValueBytes) throw TemplateError("string too large");
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (items.size() * static_cast<unsigned __int128>(times) > kMaxValueBytes / 16) throw TemplateError("list too large");
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple());
}

double float_floordiv(double a, double b, double* mod_out) {
  // CPython float_divmod.
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  if (mod_out) *mod_out = mod;
  return floordiv;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  bool both_int = is_intlike(a) && is_intlike(b);
  bool both_num = a.is_number() && b.is_number();
  if (op == "+") {
    if (both_int) {
      int64_t r;
      if (__builtin_add_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (both_num) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxValueBytes) throw TemplateError("string too large");
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple() == b.as_list().is_tuple() &&
        !a.as_list().is_generator() && !b.as_list().is_generator() && a.as_list().style == b.as_list().style) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple());
    }
    if (a.is_string()) throw TemplateError("can only concatenate str (not \"" + b.type_name() + "\") to str");
    unsupported_operands(op, a, b);
  }
  if (op == "-") {
    if (both_int) {
      int64_t r;
      if (__builtin_sub_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (both_num) return Value(a.to_double() - b.to_double());
    unsupported_operands(op, a, b);
  }
  if (op == "*") {
    if (both_int) {
      int64_t r;
      if (__builtin_mul_overflow(a.to_int(), b.to_int(), &r)) overflow();
      return Value(r);
    }
    if (both_num) return Value(a.to_double() * b.to_double());
    auto is_seq = [](const Value& v) { return v.is_string() || (v.is_list() && !v.as_list().is_generator() && v.as_list().style <= List::Style::kTuple); };
    if (is_seq(a) && is_intlike(b)) return repeat(a, b.to_int());
    if (is_intlike(a) && is_seq(b)) return repeat(b, a.to_int());
    unsupported_operands(op, a, b);
  }
  if (!both_num) {
    if (op == "%" && a.is_string()) throw TemplateError("unsupported: printf-style string formatting with %");
    unsupported_operands(op, a, b);
  }
  if (op == "/") {
    if (b.to_double() == 0.0) throw TemplateError(both_int ? "division by zero" : "float division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (both_int) {
      int64_t x = a.to_int(), y = b.to_int();
      if (y == 0) throw TemplateError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) overflow();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        r += y;
        q -= 1;
      }
      return Value(op == "//" ? q : r);
    }
    if (b.to_double() == 0.0) throw TemplateError(op == "//" ? "float floor division by zero" : "float modulo");
    double mod;
    double q = float_floordiv(a.to_double(), b.to_double(), &mod);
    return Value(op == "//" ? q : mod);
  }
  if (op == "**") {
    if (both_int && b.to_int() >= 0) {
      int64_t base = a.to_int(), e = b.to_int(), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) overflow();
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
      }
      return Value(r);
    }
    double x = a.to_double(), y = b.to_double();
    if (x == 0.0 && y < 0) throw TemplateError("0.0 cannot be raised to a negative power");
    if (x < 0 && y != std::floor(y)) throw TemplateError("unsupported: complex result of ** on a negative base");
    double r = std::pow(x, y);
    if (std::isinf(r) && !std::isinf(x)) throw TemplateError("(34, 'Numerical result out of range')");
    return Value(r);
  }
  throw TemplateError("unknown operator " + op);
}

Value negate(const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (is_intlike(a)) {
    if (a.to_int() == INT64_MIN) overflow();
    return Value(-a.to_int());
  }
  if (a.is_float()) return Value(-a.as_float());
  throw TemplateError("bad operand type for unary -: '" + a.type_name() + "'");
}

Value unary_plus(const Value& a) {
  if (a.is_undefined()) fail_undefined(a);
  if (is_intlike(a)) return Value(a.to_int());
  if (a.is_float()) return a;
  throw TemplateError("bad operand type for unary +: '" + a.type_name() + "'");
}

}  // namespace pagellm::jinja
