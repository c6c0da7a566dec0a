// gpt-oss's MXFP4 experts (model/gpt_oss_moe.cpp) load with the bounds of their scale bytes
// (backend.h MoeExpertWeights::scale_min / scale_max): the CUDA backend reads them to run kernels
// without the general MXFP4 conversion, so they must be the checkpoint's own minimum and maximum.
#include <algorithm>
#include <filesystem>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/make_model.h"
#include "model/moe_ffn.h"
#include "model/weights.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

struct ByteBounds {
  int min, max;
};

ByteBounds bounds_of(const TensorInfo& info) {
  const auto* bytes = static_cast<const uint8_t*>(info.data);
  const auto [low, high] = std::minmax_element(bytes, bytes + info.nbytes);
  return {*low, *high};
}

TEST(GptOssMoeWeights, Mxfp4StacksCarryTheBoundsOfTheirScales) {
  MakeModelOptions o;
  o.preset = "gpt-oss-micro";
  o.out_dir = (fs::temp_directory_path() / ("pagellm_gpt_oss_moe_" + std::to_string(::getpid()))).string();
  o.dtype = DType::kF32;
  fs::remove_all(o.out_dir);
  ASSERT_TRUE(make_model(o).is_ok());
  auto config = load_model_config((fs::path(o.out_dir) / "config.json").string());
  ASSERT_TRUE(config.has_value()) << config.status().message();
  auto checkpoint = Checkpoint::open_dir(o.out_dir);
  ASSERT_TRUE(checkpoint.has_value()) << checkpoint.status().message();
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.has_value()) << backend.status().message();
  WeightLoader loader(*checkpoint, **backend, DType::kF32, config->quantization);
  for (const int layer : {0, 1}) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".mlp.";
    auto moe = load_gpt_oss_moe_weights(loader, **backend, *config, prefix);
    ASSERT_TRUE(moe.has_value()) << moe.status().message();
    const std::pair<const ExpertStack*, const char*> stacks[] = {{&moe->gate_up, "gate_up_proj_scales"},
                                                                 {&moe->down, "down_proj_scales"}};
    for (const auto& [stack, name] : stacks) {
      const TensorInfo* raw = checkpoint->find(prefix + "experts." + name);
      ASSERT_NE(raw, nullptr) << prefix << name;
      const ByteBounds expected = bounds_of(*raw);
      ASSERT_TRUE(stack->scales.defined()) << prefix << name;
      EXPECT_EQ(stack->scale_min, expected.min) << prefix << name;
      EXPECT_EQ(stack->scale_max, expected.max) << prefix << name;
      EXPECT_EQ(stack->view().scale_min, expected.min) << prefix << name;
      EXPECT_EQ(stack->view().scale_max, expected.max) << prefix << name;
    }
  }
  fs::remove_all(o.out_dir);
}

}  // namespace
}  // namespace pagellm
