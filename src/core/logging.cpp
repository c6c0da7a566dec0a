#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace pagellm {

void init_logging(const std::string& level) {
  auto logger = spdlog::get("pagellm");
  if (!logger) logger = spdlog::stderr_color_mt("pagellm");
  logger->set_pattern("%H:%M:%S.%e %^%L%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace pagellm
