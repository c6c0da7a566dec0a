// `--sweep-concurrency 1,16,64,128`: the same load run once per concurrency level, in turn.
// Each level sends --num-prompts requests when that was given, else 4 × the level (enough for
// the level to reach its steady state without making level 1 take forever). The results go to
// one JSON file ({"levels": [vLLM result object per level]}) and an SVG chart next to it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/dataset.h"
#include "bench/metrics.h"
#include "bench/report.h"
#include "bench/serve_runner.h"

namespace pagellm::bench {

inline constexpr int kSweepPromptsPerLevel = 4;

struct SweepLevelResult {
  int concurrency = 0;
  BenchMetrics metrics;
  nlohmann::json result_json;
};

// "1,16,64,128" -> {1, 16, 64, 128}; each ≥ 1.
Expected<std::vector<int>> parse_concurrency_levels(const std::string& text);
int sweep_num_prompts(int level, std::optional<int> num_prompts);

using DatasetForCount = std::function<Expected<Dataset>(int num_prompts)>;
using LevelDone = std::function<void(const SweepLevelResult&, const RunDescription&)>;

// Runs every level with max_concurrency = level; on_level_done (may be empty) sees each result.
Expected<std::vector<SweepLevelResult>> run_concurrency_sweep(
    const ServeConfig& config, const std::vector<int>& levels, std::optional<int> num_prompts,
    const DatasetForCount& make_dataset, const RunDescription& description,
    const GoodputSlo& slo, const LevelDone& on_level_done);

// The chart path for a JSON path: "out/sweep.json" -> "out/sweep.svg".
std::string sweep_chart_path(const std::string& json_path);
// Writes json_path and the chart next to it.
Status write_sweep_outputs(const std::string& json_path, const std::vector<SweepLevelResult>& levels,
                           const RunDescription& description);

}  // namespace pagellm::bench
