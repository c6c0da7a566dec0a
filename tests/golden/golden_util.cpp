// Helpers shared by the golden tests; see golden_util.h. No TEST()s here.
#include "golden_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <cstdlib>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/model.h"

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
    GoldenCase golden;
    golden.prompt = c["prompt_ids"].get<std::vector<TokenId>>();
    golden.logits = c["prompt_next_token_logits"].get<std::vector<float>>();
    golden.full_forward = c.contains("full_forward_greedy_token_ids");
    golden.greedy = c[golden.full_forward ? "full_forward_greedy_token_ids" : "greedy_token_ids"].get<std::vector<TokenId>>();
    golden.margins = c[golden.full_forward ? "full_forward_top1_margins" : "top1_margins"].get<std::vector<float>>();
    if (c.contains("full_forward_top5")) {
      for (const auto& step : c["full_forward_top5"]) {
        std::vector<std::pair<TokenId, float>> top;
        for (size_t k = 0; k < step["ids"].size(); ++k) top.emplace_back(step["ids"][k], step["logprobs"][k]);
        golden.top5.push_back(std::move(top));
      }
    }
    cases.push_back(std::move(golden));
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

fs::path qwen3_fixture_with_tokenizer(const std::string& tag) {
  const fs::path tokenizer = source_root() / "assets/tokenizers/qwen3/tokenizer.json";
  if (!fs::exists(tokenizer)) return {};
  const fs::path fixture = golden_fixture_root("qwen3") / "tied_gqa2_hd32_f32";
  const fs::path dir = fs::temp_directory_path() / ("pagellm_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const char* name : {"config.json", "model.safetensors"})
    fs::copy_file(fixture / name, dir / name, fs::copy_options::overwrite_existing);
  fs::copy_file(tokenizer, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  return dir;
}

std::unique_ptr<LLM> make_test_llm(const fs::path& model_dir, EngineConfig config, const std::string& device) {
  config.model_dir = model_dir.string();
  config.device = device;
  if (config.kv_cache_memory_bytes == 0) config.kv_cache_memory_bytes = 64 << 20;
  auto llm = LLM::load(config);
  EXPECT_TRUE(llm.has_value()) << llm.status().message();
  return llm.has_value() ? std::move(llm).value() : nullptr;
}

void expect_matches_transformers(const std::string& device, const fs::path& dir) {
  const bool is_f32 = read_golden_dtype(dir) == "float32";
  const std::string fixture = dir.filename().string();
  auto backend = make_backend(device);
  ASSERT_TRUE(backend.has_value()) << backend.status().message();
  auto model = load_model(dir.string(), **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();

  for (const GoldenCase& c : read_golden_cases(dir)) {
    const std::vector<TokenId>& want = c.greedy;
    SequenceOptions options = greedy_options(static_cast<int>(want.size()));
    if (!c.top5.empty()) options.sampling.num_logprobs = 5;
    auto got = generate_sequence(**model, **backend, c.prompt, options);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    SCOPED_TRACE("prompt of " + std::to_string(c.prompt.size()) + " tokens");

    ASSERT_EQ(got->prompt_logits.size(), c.logits.size());
    const auto [max_abs_logit, max_err] = logit_error(got->prompt_logits, c.logits);
    if (is_f32) {
      EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_abs_logit)) << "max |logit| " << max_abs_logit;
      EXPECT_EQ(got->token_ids, want);
      // Top-5 logprobs of every greedy step within 1e-3 (ids compared where the oracle's gap to the
      // next candidate is clear of that tolerance).
      for (size_t step = 0; step < c.top5.size() && step < got->logprobs.size() && got->token_ids == want; ++step) {
        const auto& top = got->logprobs[step].top;
        ASSERT_EQ(top.size(), c.top5[step].size()) << "step " << step;
        for (size_t k = 0; k < top.size(); ++k) {
          EXPECT_NEAR(top[k].logprob, c.top5[step][k].second, 1e-3) << "step " << step << " rank " << k;
          const bool clear = k + 1 >= top.size() || c.top5[step][k].second - c.top5[step][k + 1].second > 2e-3;
          const bool clear_above = k == 0 || c.top5[step][k - 1].second - c.top5[step][k].second > 2e-3;
          if (clear && clear_above) EXPECT_EQ(top[k].token_id, c.top5[step][k].first) << "step " << step << " rank " << k;
        }
      }
    } else {
      // bf16: every op rounds to 8 bits of mantissa; 2% of the logit range is a few bf16 ulps of
      // the largest logits after the rounding noise of every layer, and never less than 4 ulps:
      // transformers' eager attention rounds q.k, the softmax and P.V to bf16 where pagellm keeps
      // f32 (one-token prompts, whose attention is exact either way, match to 0), so small-logit
      // fixtures with many layers (gemma3_local_global_bf16: 3.3 ulps) sit a few ulps apart.
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(1.0, max_abs_logit)) - 7);
      const double tolerance = std::max(0.02 * std::max(1.0, max_abs_logit), 4 * ulp);
      EXPECT_LE(max_err, tolerance) << "max |logit| " << max_abs_logit;
      // Greedy tokens must agree until the first step where the oracle itself was within the logit
      // tolerance of a tie (bf16 logits tie often); a parting at a confident step is a bug.
      size_t agreed = 0;
      while (agreed < want.size() && got->token_ids[agreed] == want[agreed]) ++agreed;
      if (agreed < want.size()) {
        EXPECT_LE(c.margins[agreed], 2 * tolerance) << "parted from the oracle at step " << agreed;
      }
      std::fprintf(stderr, "  bf16: %zu of %zu greedy tokens agree\n", agreed, want.size());
    }
    std::fprintf(stderr, "  %s prompt %zu: max |logit err| %.3g of max |logit| %.3g\n", fixture.c_str(),
                 c.prompt.size(), max_err, max_abs_logit);
  }
}

Status write_as_vision_language_weights(const fs::path& src_dir, const fs::path& dst_dir, const std::string& text_prefix,
                                        const std::vector<std::string>& extra) {
  PAGELLM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::open_dir(src_dir.string()));
  SafetensorsWriter writer;
  for (const std::string& name : checkpoint.names()) {
    const TensorInfo* t = checkpoint.find(name);
    const auto* bytes = static_cast<const uint8_t*>(t->data);
    const std::string renamed = name.rfind("model.", 0) == 0 ? text_prefix + name.substr(6) : name;
    writer.add(renamed, t->dtype, t->shape, std::vector<uint8_t>(bytes, bytes + t->nbytes));
  }
  for (const std::string& name : extra) writer.add(name, DType::kF32, {4, 4}, std::vector<uint8_t>(64, 0));
  return writer.write((dst_dir / "model.safetensors").string());
}

}  // namespace pagellm
