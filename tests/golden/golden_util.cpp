// Helpers shared by the golden tests; see golden_util.h. No TEST()s here.
#include "golden_util.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "backend/backend.h"

namespace pagellm {

fs::path source_root() {
  const char* source_dir = std::getenv("PAGELLM_SOURCE_DIR");
  return fs::path(source_dir != nullptr && *source_dir != '\0' ? source_dir : PAGELLM_SOURCE_DIR);
}

fs::path golden_fixture_root(const std::string& family) { return source_root() / "tests/golden" / family; }

bool GoldenCase::oracle_consistent() const {
  std::vector<float> sorted = logits;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return std::fabs((sorted[0] - sorted[1]) - margins[0]) < 1e-3;
}

std::vector<TokenId> GoldenCase::checked(const std::vector<TokenId>& tokens) const {
  return full_forward || oracle_consistent() ? tokens : std::vector<TokenId>(tokens.begin(), tokens.begin() + 1);
}

namespace {

nlohmann::json read_expected(const fs::path& fixture_dir) {
  std::ifstream in(fixture_dir / "expected.json");
  return nlohmann::json::parse(in);
}

}  // namespace

std::vector<GoldenCase> read_golden_cases(const fs::path& fixture_dir) {
  const nlohmann::json expected = read_expected(fixture_dir);
  std::vector<GoldenCase> cases;
  for (const auto& c : expected["cases"]) {
    if (c.contains("full_forward_greedy_token_ids"))
      cases.push_back({c["prompt_ids"], c["full_forward_greedy_token_ids"], c["full_forward_top1_margins"],
                       c["prompt_next_token_logits"], true});
    else
      cases.push_back({c["prompt_ids"], c["greedy_token_ids"], c["top1_margins"], c["prompt_next_token_logits"]});
  }
  return cases;
}

std::string read_golden_dtype(const fs::path& fixture_dir) { return read_expected(fixture_dir)["dtype"]; }

std::vector<std::string> golden_fixture_names(const fs::path& root) {
  std::vector<std::string> names;
  if (!fs::exists(root)) return names;
  for (const auto& entry : fs::directory_iterator(root))
    if (fs::exists(entry.path() / "expected.json")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

LogitError logit_error(const std::vector<float>& got, const std::vector<float>& want) {
  LogitError e;
  for (size_t i = 0; i < want.size(); ++i) {
    e.max_abs_logit = std::max(e.max_abs_logit, std::fabs(static_cast<double>(want[i])));
    e.max_err = std::max(e.max_err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return e;
}

std::optional<std::string> backend_unavailable(const std::string& device) {
  if (device == "cpu") return std::nullopt;
  static std::map<std::string, std::optional<std::string>> known;  // probing a device costs a context
  auto it = known.find(device);
  if (it != known.end()) return it->second;
  std::optional<std::string> why;
  const std::vector<std::string> built = available_backends();
  if (std::find(built.begin(), built.end(), device) == built.end()) {
    why = "built without the " + device + " backend";
  } else {
    auto backend = make_backend(device);
    if (!backend.has_value()) why = "no " + device + " device: " + backend.status().message();
  }
  known.emplace(device, why);
  return why;
}

void PrintTo(const BackendFixture& param, std::ostream* os) { *os << param.device << "/" << param.fixture; }

std::vector<BackendFixture> backend_fixtures(const std::string& device, const fs::path& root) {
  std::vector<BackendFixture> params;
  for (const std::string& name : golden_fixture_names(root)) params.push_back({device, name});
  return params;
}

std::vector<std::vector<TokenId>> long_gdn_prompts() {
  std::mt19937 rng(5);
  std::vector<std::vector<TokenId>> prompts;
  for (int length : {150, 65, 9, 64}) {
    std::vector<TokenId> prompt(static_cast<size_t>(length));
    for (TokenId& t : prompt) t = static_cast<TokenId>(rng() % 512);
    prompts.push_back(prompt);
  }
  return prompts;
}

SequenceOptions greedy_options(int max_tokens) {
  SequenceOptions options;
  options.sampling.temperature = 0.0f;
  options.sampling.max_tokens = max_tokens;
  return options;
}

GenerateRequest greedy_request(std::vector<TokenId> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.sampling.max_tokens = max_tokens;
  return r;
}

std::unique_ptr<LLM> make_test_llm(const fs::path& model_dir, EngineConfig config, const std::string& device) {
  config.model_dir = model_dir.string();
  config.device = device;
  if (config.kv_cache_memory_bytes == 0) config.kv_cache_memory_bytes = 64 << 20;
  auto llm = LLM::load(config);
  EXPECT_TRUE(llm.has_value()) << llm.status().message();
  return llm.has_value() ? std::move(llm).value() : nullptr;
}

}  // namespace pagellm
