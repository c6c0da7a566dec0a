// Checkpoint layouts beyond a family's plain save_pretrained. Released Gemma 3 checkpoints of 4B and up are Gemma3ForConditionalGeneration: config.json of
// model_type "gemma3" with the text model under text_config, and the text weights under
// language_model.model.* (transformers v4 saves) or model.language_model.* (v5), beside a vision
// tower a text engine does not load. The gemma3 fixture rewritten in both layouts must load and give
// transformers' greedy tokens.
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "golden_util.h"
#include "model/model.h"

namespace pagellm {
namespace {

const fs::path kText = golden_fixture_root("families") / "gemma3_local_global_f32";

fs::path rewrite_as_vision_language(const std::string& text_prefix) {
  const fs::path dir = fs::temp_directory_path() / ("pagellm_gemma3_vlm_" + std::to_string(::getpid()) + "_" +
                                                    std::to_string(text_prefix.size()));
  fs::create_directories(dir);
  nlohmann::json text_config = nlohmann::json::parse(std::ifstream(kText / "config.json"));
  text_config.erase("architectures");
  const nlohmann::json config = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                 {"model_type", "gemma3"},
                                 {"text_config", text_config},
                                 {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 16}}}};
  std::ofstream(dir / "config.json") << config.dump(2);
  const Status written = write_as_vision_language_weights(
      kText, dir, text_prefix, {"vision_tower.vision_model.embeddings.patch_embedding.weight"});
  EXPECT_TRUE(written.is_ok()) << written.message();
  return dir;
}

TEST(FamilyLayouts, Gemma3VisionLanguageCheckpointsServeTheirTextModel) {
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    SCOPED_TRACE(prefix);
    const fs::path dir = rewrite_as_vision_language(prefix);
    auto backend = make_backend("cpu");
    ASSERT_TRUE(backend.has_value());
    auto model = load_model(dir.string(), **backend);
    ASSERT_TRUE(model.has_value()) << model.status().message();
    for (const GoldenCase& c : read_golden_cases(kText)) {
      auto got = generate_sequence(**model, **backend, c.prompt, greedy_options(static_cast<int>(c.greedy.size())));
      ASSERT_TRUE(got.has_value()) << got.status().message();
      EXPECT_EQ(got->token_ids, c.greedy) << "prompt of " << c.prompt.size() << " tokens";
    }
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
}

// gpt-oss checkpoints whose variant pagellm does not implement fail at load, naming it: MXFP4 expert
// tensors under a config without quantization_config, and a swiglu_limit other than 7.
TEST(FamilyLayouts, GptOssVariantsPagellmDoesNotImplementFailAtLoad) {
  const fs::path fixture = golden_fixture_root("families") / "gpt_oss_mxfp4_f32";
  const fs::path dir = fs::temp_directory_path() / ("pagellm_gpt_oss_variant_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fixture / "model.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  const nlohmann::json released = nlohmann::json::parse(std::ifstream(fixture / "config.json"));
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value());
  auto error_with = [&](const nlohmann::json& config) {
    std::ofstream(dir / "config.json") << config.dump(2);
    auto model = load_model(dir.string(), **backend);
    return model.has_value() ? std::string("(loaded)") : model.status().message();
  };
  nlohmann::json unquantized = released;
  unquantized.erase("quantization_config");
  EXPECT_NE(error_with(unquantized).find("experts.gate_up_proj_blocks is an MXFP4 weight, but config.json's "
                                         "quantization_config is none"),
            std::string::npos)
      << error_with(unquantized);
  nlohmann::json limit = released;
  limit["swiglu_limit"] = 10.0;
  EXPECT_NE(error_with(limit).find("swiglu_limit 10 is not supported"), std::string::npos) << error_with(limit);
  EXPECT_EQ(error_with(released), "(loaded)");
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

}  // namespace
}  // namespace pagellm
