// The Prometheus text exposition of EngineMetrics (GET /metrics): pagellm's families ("pagellm:" prefix,
// finer latency buckets, labelled model_name), then the same counts as vLLM exports them ("vllm:"
// names, vLLM's buckets, labels model_name and engine) so vLLM's dashboards and alerts work unchanged.
#pragma once

#include <string>
#include <string_view>

#include "engine/engine_metrics.h"

namespace pagellm::server {

std::string prometheus_text(const EngineMetrics& metrics, std::string_view model_name);

}  // namespace pagellm::server
