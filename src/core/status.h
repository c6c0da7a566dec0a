// Status and Expected<T>: how bad user input travels back to the caller.
// A message starts with the component in brackets: "[safetensors] tensor 'x' ends past the file".
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace pagellm {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input (HTTP 400)
  kNotFound,         // missing file, unknown model (HTTP 404)
  kUnauthenticated,  // HTTP 401
  kTooLarge,         // HTTP 413
  kUnavailable,      // queue full, loading (HTTP 429 / 503)
  kUnimplemented,    // a feature we do not support, said clearly
  kInternal,         // a bug (HTTP 500)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// Either a value or a non-ok Status (std::expected arrives only in C++23).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : data_(std::move(value)) {}
  Expected(Status status) : data_(std::move(status)) { assert(!std::get<Status>(data_).is_ok()); }

  bool has_value() const { return data_.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Status& status() const {
    static const Status kOk;
    return has_value() ? kOk : std::get<Status>(data_);
  }

 private:
  std::variant<T, Status> data_;
};

}  // namespace pagellm

// Return early from a function returning Status or Expected<U> when `expr` is not ok.
#define PAGELLM_RETURN_IF_ERROR(expr)               \
  do {                                              \
    ::pagellm::Status _st = (expr);                 \
    if (!_st.is_ok()) return _st;                   \
  } while (0)

#define PAGELLM_CONCAT_INNER(a, b) a##b
#define PAGELLM_CONCAT(a, b) PAGELLM_CONCAT_INNER(a, b)
// `PAGELLM_ASSIGN_OR_RETURN(auto x, make_x());`
#define PAGELLM_ASSIGN_OR_RETURN(decl, expr) \
  PAGELLM_ASSIGN_OR_RETURN_IMPL(PAGELLM_CONCAT(_exp_, __LINE__), decl, expr)
#define PAGELLM_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.has_value()) return tmp.status();           \
  decl = std::move(tmp).value()
