// CHECK: a broken invariant (a bug, never bad input) aborts with file:line.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace pagellm::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& msg) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
}  // namespace pagellm::detail

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) ::pagellm::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond))                                                               \
      ::pagellm::detail::check_failed(__FILE__, __LINE__, #cond,               \
                                      ::fmt::format(__VA_ARGS__));             \
  } while (0)
