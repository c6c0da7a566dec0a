// The Prometheus text exposition of EngineMetrics (GET /metrics), names as vLLM's with the
// "pagellm:" prefix, every sample labelled with model_name.
#pragma once

#include <string>
#include <string_view>

#include "engine/engine_metrics.h"

namespace pagellm::server {

std::string prometheus_text(const EngineMetrics& metrics, std::string_view model_name);

}  // namespace pagellm::server
