// config.json's quantization_config: the formats pagellm reads, and every other variant refused by name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/quant_config.h"

namespace pagellm {
namespace {

using json = nlohmann::json;

Expected<QuantConfig> parse(const char* text) { return parse_quant_config(json::parse(text), "config.json"); }

std::string error_of(const char* text) {
  auto got = parse(text);
  return got.has_value() ? "(parsed)" : got.status().message();
}

TEST(QuantConfig, ReadsBlockFp8) {
  auto got = parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [128, 64], "modules_to_not_convert": ["lm_head"]})");
  ASSERT_TRUE(got.has_value()) << got.status().message();
  EXPECT_EQ(got->method, QuantMethod::kFp8);
  EXPECT_EQ(got->block_n, 128);
  EXPECT_EQ(got->block_k, 64);
  EXPECT_EQ(got->modules_to_not_convert, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(got->describe(), "fp8 (e4m3 weights in 128x64 blocks)");
}

TEST(QuantConfig, ReadsAwqAndGptq) {
  auto awq = parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "GEMM"})");
  ASSERT_TRUE(awq.has_value()) << awq.status().message();
  EXPECT_EQ(awq->describe(), "awq (4-bit, group 128)");
  auto gptq = parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "sym": false, "desc_act": false,
                        "checkpoint_format": "gptq_v2"})");
  ASSERT_TRUE(gptq.has_value()) << gptq.status().message();
  EXPECT_EQ(gptq->group_size, 32);
  EXPECT_FALSE(gptq->sym);
  EXPECT_TRUE(gptq->gptq_v2);
  EXPECT_EQ(gptq->describe(), "gptq (4-bit, group 32, asymmetric)");
}

TEST(QuantConfig, ReadsMxfp4) {  // gpt-oss as released
  auto got = parse(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
                       "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})");
  ASSERT_TRUE(got.has_value()) << got.status().message();
  EXPECT_EQ(got->method, QuantMethod::kMxfp4);
  EXPECT_EQ(got->modules_to_not_convert.size(), 4u);
  EXPECT_EQ(got->describe(), "mxfp4 (e2m1 MoE experts, e8m0 scales per 32)");
}

TEST(QuantConfig, EverythingElseIsRefusedByName) {
  EXPECT_EQ(error_of(R"({"quant_method": "bitsandbytes", "load_in_4bit": true})"),
            "[config] config.json: quantization_config.quant_method 'bitsandbytes' is not supported (pagellm reads "
            "fp8, awq, gptq and mxfp4 checkpoints)");
  EXPECT_EQ(error_of(R"({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]})"),
            "[config] config.json: quantization_config.activation_scheme 'static' is not supported (pagellm scales FP8 "
            "activations dynamically, per token; static activation scales are not read)");
  EXPECT_EQ(error_of(R"({"quant_method": "fp8", "activation_scheme": "dynamic"})"),
            "[config] config.json: quantization_config.weight_block_size is missing: per-tensor or per-channel FP8 "
            "weights are not supported (pagellm reads block-scaled FP8, e.g. [128, 128])");
  EXPECT_EQ(error_of(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true})"),
            "[config] config.json: quantization_config.desc_act true (act-order) is not supported (pagellm reads "
            "GPTQ with desc_act false)");
  EXPECT_EQ(error_of(R"({"quant_method": "gptq", "bits": 8, "group_size": 128})"),
            "[config] config.json: quantization_config.bits 8 is not supported (pagellm reads 4-bit AWQ and GPTQ)");
  EXPECT_EQ(error_of(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"})"),
            "[config] config.json: quantization_config.version 'gemv' is not supported (pagellm reads the AWQ GEMM "
            "layout)");
  EXPECT_EQ(error_of(R"({"quant_method": "awq", "bits": 4, "group_size": -1})"),
            "[config] config.json: quantization_config.group_size -1 is not supported (pagellm reads groups of a "
            "positive multiple of 8 input channels; per-channel -1 is not read)");
  EXPECT_EQ(error_of(R"({"bits": 4})"), "[config] config.json: quantization_config.quant_method is missing");
}

TEST(QuantConfig, ModelConfigCarriesIt) {
  json config = {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", 16},
                 {"hidden_size", 8}, {"intermediate_size", 16}, {"num_hidden_layers", 1},
                 {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 4},
                 {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-6}};
  auto plain = parse_model_config(config);
  ASSERT_TRUE(plain.has_value()) << plain.status().message();
  EXPECT_FALSE(plain->quantization.enabled());
  config["quantization_config"] = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 64}};
  auto awq = parse_model_config(config);
  ASSERT_TRUE(awq.has_value()) << awq.status().message();
  EXPECT_EQ(awq->quantization.method, QuantMethod::kAwq);
  config["quantization_config"] = {{"quant_method", "mxfp4"}};
  auto refused = parse_model_config(config);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("'mxfp4' is not supported"), std::string::npos);
}

}  // namespace
}  // namespace pagellm
