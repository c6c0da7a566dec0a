#include <filesystem>
#include <fstream>
#include <iterator>

#include <unistd.h>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "model/make_model.h"
#include "model/model.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("pagellm_make_model_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(MakeModel, SameSeedSameBytesOnAnyMachine) {
  MakeModelOptions a;
  a.preset = "qwen3-micro";
  a.out_dir = temp_dir("a").string();
  a.seed = 7;
  ASSERT_TRUE(make_model(a).is_ok());
  MakeModelOptions b = a;
  b.out_dir = temp_dir("b").string();
  ASSERT_TRUE(make_model(b).is_ok());
  const std::string weights = read_bytes(fs::path(a.out_dir) / "model.safetensors");
  EXPECT_EQ(weights, read_bytes(fs::path(b.out_dir) / "model.safetensors"));
  EXPECT_EQ(read_bytes(fs::path(a.out_dir) / "config.json"), read_bytes(fs::path(b.out_dir) / "config.json"));
  // Pinned: the integer PRNG and the RNE bf16 rounding make these bytes the same everywhere; a
  // change here changes every random checkpoint (and every benchmark's model).
  EXPECT_EQ(fnv1a(weights), 0x7e529f4aa873a99cull) << std::hex << fnv1a(weights);

  MakeModelOptions c = a;
  c.out_dir = temp_dir("c").string();
  c.seed = 8;
  ASSERT_TRUE(make_model(c).is_ok());
  EXPECT_NE(weights, read_bytes(fs::path(c.out_dir) / "model.safetensors"));
  for (const auto& o : {a, b, c}) fs::remove_all(o.out_dir);
}

TEST(MakeModel, WritesALoadableCheckpoint) {
  MakeModelOptions o;
  o.preset = "qwen3-micro";
  o.out_dir = temp_dir("load").string();
  o.dtype = DType::kF32;
  ASSERT_TRUE(make_model(o).is_ok());
  auto backend = make_backend("cpu");
  auto model = load_model(o.out_dir, **backend);
  ASSERT_TRUE(model.has_value()) << model.status().message();
  EXPECT_EQ((*model)->config().vocab_size, 512);
  EXPECT_EQ((*model)->config().dtype, DType::kF32);
  fs::remove_all(o.out_dir);
}

TEST(MakeModel, UnknownPresetIsAClearError) {
  MakeModelOptions o;
  o.preset = "gpt-5";
  o.out_dir = temp_dir("bad").string();
  const Status st = make_model(o);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("unknown preset 'gpt-5'"), std::string::npos);
}

// --num-layers: the same layer shapes, fewer (or more) of them; a per-layer pattern (gpt-oss's
// alternating sliding / full attention) repeats from its start; the checkpoint loads.
TEST(MakeModel, NumLayersCutsTheModelAndKeepsTheLayerPattern) {
  auto backend = make_backend("cpu");
  for (const auto& [preset, layers] : {std::pair<std::string, int64_t>{"qwen3-micro", 3}, {"gpt-oss-micro", 3},
                                       {"qwen3-moe-micro", 1}, {"qwen3.5-micro", 5}}) {
    MakeModelOptions o;
    o.preset = preset;
    o.out_dir = temp_dir("layers").string();
    o.dtype = DType::kF32;
    o.num_layers = layers;
    ASSERT_TRUE(make_model(o).is_ok()) << preset;
    const std::string config = read_bytes(fs::path(o.out_dir) / "config.json");
    EXPECT_NE(config.find("\"num_hidden_layers\": " + std::to_string(layers)), std::string::npos) << preset;
    if (preset == "gpt-oss-micro") {
      std::string compact = config;
      std::erase_if(compact, [](char c) { return c == ' ' || c == '\n'; });
      EXPECT_NE(compact.find("\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\"]"),
                std::string::npos)
          << config;
    }
    auto model = load_model(o.out_dir, **backend);
    ASSERT_TRUE(model.has_value()) << preset << ": " << model.status().message();
    EXPECT_EQ((*model)->config().num_hidden_layers, layers) << preset;
    fs::remove_all(o.out_dir);
  }
  MakeModelOptions bad;
  bad.preset = "qwen3-micro";
  bad.out_dir = temp_dir("layers_bad").string();
  bad.num_layers = -2;
  const Status st = make_model(bad);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("--num-layers -2"), std::string::npos) << st.message();
}

TEST(LoadModel, UnknownArchitectureListsTheSupportedOnes) {
  MakeModelOptions o;
  o.preset = "qwen3-micro";
  o.out_dir = temp_dir("arch").string();
  ASSERT_TRUE(make_model(o).is_ok());
  std::string config = read_bytes(fs::path(o.out_dir) / "config.json");
  config.replace(config.find("Qwen3ForCausalLM"), 16, "MambaForCausalLM");
  std::ofstream(fs::path(o.out_dir) / "config.json") << config;
  auto backend = make_backend("cpu");
  auto model = load_model(o.out_dir, **backend);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("'MambaForCausalLM' is not supported; supported: "), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("Qwen3ForCausalLM"), std::string::npos);
  fs::remove_all(o.out_dir);
}

TEST(LoadModel, WrongTensorShapeAndMissingTensorAreOneLineErrors) {
  MakeModelOptions o;
  o.preset = "qwen3-micro";
  o.out_dir = temp_dir("shape").string();
  ASSERT_TRUE(make_model(o).is_ok());
  std::string config = read_bytes(fs::path(o.out_dir) / "config.json");
  config.replace(config.find("\"intermediate_size\": 128"), 24, "\"intermediate_size\": 96");
  std::ofstream(fs::path(o.out_dir) / "config.json") << config;
  auto backend = make_backend("cpu");
  auto model = load_model(o.out_dir, **backend);
  ASSERT_FALSE(model.has_value());
  EXPECT_NE(model.status().message().find("model.layers.0.mlp.gate_proj.weight"), std::string::npos)
      << model.status().message();
  EXPECT_EQ(model.status().message().find('\n'), std::string::npos);
  fs::remove(fs::path(o.out_dir) / "model.safetensors");
  auto missing = load_model(o.out_dir, **backend);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().message().find('\n'), std::string::npos);
  fs::remove_all(o.out_dir);
}

}  // namespace
}  // namespace pagellm
