// --generation-config: generation_config.json's sampling defaults fill what a request leaves out.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "server/generation_defaults.h"

namespace pagellm::server {
namespace {

namespace fs = std::filesystem;

fs::path folder_with(const std::string& generation_config) {
  const fs::path dir = fs::temp_directory_path() / ("pagellm_gen_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "generation_config.json") << generation_config;
  return dir;
}

TEST(GenerationDefaults, FillOnlyWhatTheRequestLeavesOut) {
  const fs::path dir = folder_with(R"({"do_sample": true, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                       "max_new_tokens": 77, "bos_token_id": 1})");
  auto defaults = load_generation_defaults("auto", dir.string());
  ASSERT_TRUE(defaults.has_value()) << defaults.status().message();
  EXPECT_EQ(defaults->describe(), "temperature=0.6, top_p=0.95, top_k=20, max_tokens=77");
  CommonFields common;
  apply_generation_defaults(nlohmann::ordered_json{{"top_p", 0.5}}, *defaults, common);
  EXPECT_FLOAT_EQ(common.sampling.temperature, 0.6f);
  EXPECT_FLOAT_EQ(common.sampling.top_p, 1.0f) << "the request named top_p: its (parsed) value stays";
  EXPECT_EQ(common.sampling.top_k, 20);
  EXPECT_EQ(common.max_tokens, 77);
  CommonFields own;
  own.max_tokens = 5;
  own.sampling.temperature = 1.0f;
  apply_generation_defaults(nlohmann::ordered_json{{"temperature", 1.0}, {"max_tokens", 5}}, *defaults, own);
  EXPECT_FLOAT_EQ(own.sampling.temperature, 1.0f);
  EXPECT_EQ(own.max_tokens, 5);
  fs::remove_all(dir);
}

TEST(GenerationDefaults, GreedyConfigsVllmModeAndMissingFolders) {
  const fs::path dir = folder_with(R"({"do_sample": false, "temperature": 0.7})");
  auto greedy = load_generation_defaults(dir.string(), "/unused");
  ASSERT_TRUE(greedy.has_value());
  EXPECT_EQ(greedy->temperature, 0.0) << "do_sample false means greedy";
  EXPECT_TRUE(load_generation_defaults("vllm", dir.string())->empty());
  EXPECT_TRUE(load_generation_defaults("auto", "/nonexistent")->empty()) << "auto without a file: no defaults";
  auto missing = load_generation_defaults("/nonexistent", "/unused");
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.status().message().find("--generation-config /nonexistent"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagellm::server
