#include "bench/concurrency_sweep.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/sweep_chart.h"

namespace pagellm::bench {

Expected<std::vector<int>> parse_concurrency_levels(const std::string& text) {
  std::vector<int> levels;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    int level = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), level);
    if (ec != std::errc() || ptr != item.data() + item.size() || level < 1) {
      return invalid_argument("[bench] --sweep-concurrency wants integers ≥ 1, got '{}'", item);
    }
    levels.push_back(level);
  }
  if (levels.empty()) return invalid_argument("[bench] --sweep-concurrency is empty");
  return levels;
}

int sweep_num_prompts(int level, std::optional<int> num_prompts) {
  return num_prompts.value_or(kSweepPromptsPerLevel * level);
}

Expected<std::vector<SweepLevelResult>> run_concurrency_sweep(
    const ServeConfig& config, const std::vector<int>& levels, std::optional<int> num_prompts,
    const DatasetForCount& make_dataset, const RunDescription& description,
    const GoodputSlo& slo, const LevelDone& on_level_done) {
  std::vector<SweepLevelResult> results;
  for (int level : levels) {
    int count = sweep_num_prompts(level, num_prompts);
    PAGELLM_ASSIGN_OR_RETURN(Dataset dataset, make_dataset(count));
    ServeConfig level_config = config;
    level_config.max_concurrency = level;
    PAGELLM_ASSIGN_OR_RETURN(RunResult run, run_serve_benchmark(level_config, dataset.requests));
    RunDescription level_description = description;
    level_description.num_prompts = count;
    level_description.max_concurrency = level;
    level_description.notes.insert(level_description.notes.end(), dataset.notes.begin(),
                                   dataset.notes.end());
    SweepLevelResult level_result;
    level_result.concurrency = level;
    level_result.metrics = compute_metrics(run.records, run.duration_s, run.peak_concurrency, slo,
                                           description.percentiles);
    level_result.result_json =
        make_result_json(level_result.metrics, level_description, run, /*with_details=*/false);
    if (on_level_done) on_level_done(level_result, level_description);
    results.push_back(std::move(level_result));
  }
  return results;
}

std::string sweep_chart_path(const std::string& json_path) {
  return std::filesystem::path(json_path).replace_extension(".svg").string();
}

namespace {

Status write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("[bench] cannot write '{}'", path);
  out << text;
  out.close();
  if (!out) return internal_error("[bench] failed writing '{}'", path);
  return Status::ok();
}

}  // namespace

Status write_sweep_outputs(const std::string& json_path, const std::vector<SweepLevelResult>& levels,
                           const RunDescription& description) {
  nlohmann::json doc;
  doc["model_id"] = description.model;
  doc["base_url"] = description.base_url;
  doc["endpoint"] = description.endpoint;
  doc["dataset_name"] = description.dataset_name;
  doc["num_prompts_rule"] = fmt::format("--num-prompts if given, else {} x concurrency", kSweepPromptsPerLevel);
  doc["levels"] = nlohmann::json::array();
  std::vector<SweepPoint> points;
  for (const SweepLevelResult& level : levels) {
    doc["levels"].push_back(level.result_json);
    points.push_back({level.concurrency, level.metrics.output_throughput, level.metrics.tpot.median_ms});
  }
  PAGELLM_RETURN_IF_ERROR(write_text_file(json_path, doc.dump(2) + "\n"));
  std::string title = fmt::format("{} — {} ({})", description.model, description.dataset_name,
                                  description.base_url);
  return write_text_file(sweep_chart_path(json_path), render_sweep_chart_svg(points, title));
}

}  // namespace pagellm::bench
