// Logging goes through spdlog; one place sets the level and format.
#pragma once

#include <spdlog/spdlog.h>

namespace pagellm {
// level: "debug", "info", "warn", "error", "off". Logs go to stderr so stdout stays machine-readable.
void init_logging(const std::string& level);
}  // namespace pagellm

#define LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
