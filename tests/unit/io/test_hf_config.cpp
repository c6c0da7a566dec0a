#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io_test_util.h"

namespace pagellm {
namespace {

using nlohmann::json;
using pagellm::testing::has_substr;
using pagellm::testing::TempDir;
using pagellm::testing::write_text_file;

constexpr LayerType F = LayerType::kFullAttention;
constexpr LayerType S = LayerType::kSlidingAttention;
constexpr LayerType L = LayerType::kLinearAttention;

// Qwen/Qwen3-0.6B config.json as released (transformers 4.51, v4 form).
const char* kQwen3V4 = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// A tiny Qwen3 as transformers 5 saves it (rope_parameters, dtype, explicit layer_types, eos null).
const char* kQwen3V5 = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "bos_token_id": null,
  "dtype": "float32",
  "eos_token_id": null,
  "head_dim": 32,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "layer_types": ["full_attention", "full_attention"],
  "max_position_embeddings": 4096,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "sliding_window": null,
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_sliding_window": false,
  "vocab_size": 256
})";

// Qwen/Qwen3.5-0.8B (VLM): the text model's fields under text_config (layer_types left out here so
// they are derived from full_attention_interval).
const char* kQwen35Vlm = R"({
  "architectures": ["Qwen3_5ForConditionalGeneration"],
  "image_token_id": 248056,
  "model_type": "qwen3_5",
  "text_config": {
    "attention_bias": false,
    "attn_output_gate": true,
    "dtype": "bfloat16",
    "eos_token_id": 248044,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "intermediate_size": 3584,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_value_head_dim": 128,
    "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 262144,
    "model_type": "qwen3_5_text",
    "mtp_num_hidden_layers": 1,
    "num_attention_heads": 8,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {
      "mrope_interleaved": true,
      "mrope_section": [11, 11, 10],
      "partial_rotary_factor": 0.25,
      "rope_theta": 10000000,
      "rope_type": "default"
    },
    "vocab_size": 248320
  },
  "tie_word_embeddings": true,
  "transformers_version": "4.57.0.dev0",
  "video_token_id": 248057,
  "vision_config": {"depth": 12, "hidden_size": 768, "out_hidden_size": 1024, "model_type": "qwen3_5"}
})";

// Qwen/Qwen3-Next-80B-A3B-Instruct (v4 form: top-level rope_theta and partial_rotary_factor).
const char* kQwen3Next = R"({
  "architectures": ["Qwen3NextForCausalLM"],
  "bos_token_id": 151643,
  "decoder_sparse_step": 1,
  "eos_token_id": 151645,
  "full_attention_interval": 4,
  "head_dim": 256,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 5120,
  "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128,
  "linear_num_key_heads": 16,
  "linear_num_value_heads": 32,
  "linear_value_head_dim": 128,
  "max_position_embeddings": 262144,
  "mlp_only_layers": [],
  "model_type": "qwen3_next",
  "moe_intermediate_size": 512,
  "norm_topk_prob": true,
  "num_attention_heads": 16,
  "num_experts": 512,
  "num_experts_per_tok": 10,
  "num_hidden_layers": 48,
  "num_key_value_heads": 2,
  "partial_rotary_factor": 0.25,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 5000000,
  "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.57.0.dev0",
  "vocab_size": 151936
})";

ModelConfig parse_ok(const json& config_json) {
  auto config = parse_model_config(config_json);
  EXPECT_TRUE(config.has_value()) << config.status().message();
  return config.has_value() ? config.value() : ModelConfig{};
}

std::string parse_error(const json& config_json) {
  auto config = parse_model_config(config_json);
  EXPECT_FALSE(config.has_value());
  return config.status().message();
}

TEST(HfConfig, Qwen3V4Form) {
  const ModelConfig config = parse_ok(json::parse(kQwen3V4));
  EXPECT_EQ(config.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(config.model_type, "qwen3");
  EXPECT_EQ(config.dtype, DType::kBF16);
  EXPECT_EQ(config.vocab_size, 151936);
  EXPECT_EQ(config.hidden_size, 1024);
  EXPECT_EQ(config.intermediate_size, 3072);
  EXPECT_EQ(config.num_hidden_layers, 28);
  EXPECT_EQ(config.num_attention_heads, 16);
  EXPECT_EQ(config.num_key_value_heads, 8);
  EXPECT_EQ(config.head_dim, 128);  // explicit, not 1024 / 16
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, 1e-6);
  EXPECT_EQ(config.hidden_act, "silu");
  EXPECT_EQ(config.max_position_embeddings, 40960);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e6);
  EXPECT_EQ(config.rope.type, "default");
  EXPECT_DOUBLE_EQ(config.rope.partial_rotary_factor, 1.0);
  EXPECT_FALSE(config.sliding_window.has_value());
  EXPECT_EQ(config.layer_types, std::vector<LayerType>(28, F));
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(config.bos_token_id, 151643);
  EXPECT_EQ(config.linear_num_key_heads, 0);
  EXPECT_EQ(config.num_experts, 0);
}

TEST(HfConfig, Qwen3V5Form) {
  const ModelConfig config = parse_ok(json::parse(kQwen3V5));
  EXPECT_EQ(config.dtype, DType::kF32);
  EXPECT_EQ(config.head_dim, 32);
  EXPECT_DOUBLE_EQ(config.rope.theta, 10000.0);
  EXPECT_EQ(config.rope.type, "default");
  EXPECT_FALSE(config.tie_word_embeddings);
  EXPECT_TRUE(config.eos_token_ids.empty());
  EXPECT_FALSE(config.bos_token_id.has_value());
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{F, F}));
}

TEST(HfConfig, Qwen35VlmMergesTextConfig) {
  json config_json = json::parse(kQwen35Vlm);
  // A top-level field that text_config also sets: text_config wins.
  config_json["vocab_size"] = 7;
  const ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(config.model_type, "qwen3_5_text");
  EXPECT_EQ(config.dtype, DType::kBF16);
  EXPECT_EQ(config.vocab_size, 248320);
  EXPECT_EQ(config.hidden_size, 1024);
  EXPECT_EQ(config.intermediate_size, 3584);
  EXPECT_EQ(config.num_hidden_layers, 24);
  EXPECT_EQ(config.num_attention_heads, 8);
  EXPECT_EQ(config.num_key_value_heads, 2);
  EXPECT_EQ(config.head_dim, 256);
  EXPECT_TRUE(config.tie_word_embeddings);  // only at the top level
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e7);
  EXPECT_DOUBLE_EQ(config.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(config.rope.mrope_section, (std::vector<int64_t>{11, 11, 10}));
  EXPECT_TRUE(config.rope.mrope_interleaved);
  EXPECT_EQ(config.linear_num_key_heads, 16);
  EXPECT_EQ(config.linear_num_value_heads, 16);
  EXPECT_EQ(config.linear_key_head_dim, 128);
  EXPECT_EQ(config.linear_value_head_dim, 128);
  EXPECT_EQ(config.linear_conv_kernel_dim, 4);
  EXPECT_EQ(config.full_attention_interval, 4);
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{248044});
  ASSERT_EQ(config.layer_types.size(), 24u);
  for (size_t i = 0; i < 24; ++i) EXPECT_EQ(config.layer_types[i], (i % 4 == 3) ? F : L) << i;
}

TEST(HfConfig, Qwen3NextV4Form) {
  const ModelConfig config = parse_ok(json::parse(kQwen3Next));
  EXPECT_EQ(config.model_type, "qwen3_next");
  EXPECT_DOUBLE_EQ(config.rope.theta, 5e6);
  EXPECT_DOUBLE_EQ(config.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(config.num_experts, 512);
  EXPECT_EQ(config.num_experts_per_tok, 10);
  EXPECT_EQ(config.moe_intermediate_size, 512);
  EXPECT_EQ(config.shared_expert_intermediate_size, 512);
  EXPECT_TRUE(config.norm_topk_prob);
  EXPECT_EQ(config.decoder_sparse_step, 1);
  EXPECT_TRUE(config.mlp_only_layers.empty());
  EXPECT_EQ(config.linear_num_value_heads, 32);
  ASSERT_EQ(config.layer_types.size(), 48u);
  EXPECT_EQ(config.layer_types[0], L);
  EXPECT_EQ(config.layer_types[3], F);
  EXPECT_EQ(config.layer_types[47], F);
  EXPECT_EQ(std::count(config.layer_types.begin(), config.layer_types.end(), F), 12);

  // An MoE model may leave out the dense width.
  json no_dense = json::parse(kQwen3Next);
  no_dense.erase("intermediate_size");
  EXPECT_EQ(parse_ok(no_dense).intermediate_size, 0);
}

TEST(HfConfig, HybridIntervalDefaultsToFourAndExplicitListsWin) {
  json config_json = json::parse(kQwen3Next);
  config_json.erase("full_attention_interval");
  config_json["num_hidden_layers"] = 8;
  EXPECT_EQ(parse_ok(config_json).layer_types, (std::vector<LayerType>{L, L, L, F, L, L, L, F}));
  config_json["full_attention_interval"] = 2;
  EXPECT_EQ(parse_ok(config_json).layer_types, (std::vector<LayerType>{L, F, L, F, L, F, L, F}));
  config_json["num_hidden_layers"] = 3;
  config_json["layer_types"] = {"full_attention", "linear_attention", "linear_attention"};
  EXPECT_EQ(parse_ok(config_json).layer_types, (std::vector<LayerType>{F, L, L}));
}

TEST(HfConfig, Qwen3SlidingWindowDerivation) {
  json config_json = json::parse(kQwen3V4);
  config_json["num_hidden_layers"] = 4;
  config_json["sliding_window"] = 4096;
  // use_sliding_window false: transformers drops the window.
  ModelConfig config = parse_ok(config_json);
  EXPECT_FALSE(config.sliding_window.has_value());
  EXPECT_EQ(config.layer_types, std::vector<LayerType>(4, F));

  config_json["use_sliding_window"] = true;
  config_json["max_window_layers"] = 2;
  config = parse_ok(config_json);
  EXPECT_EQ(config.sliding_window, 4096);
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{F, F, S, S}));

  // On, but with no window value: no layer slides.
  config_json["sliding_window"] = nullptr;
  config = parse_ok(config_json);
  EXPECT_FALSE(config.sliding_window.has_value());
  EXPECT_EQ(config.layer_types, std::vector<LayerType>(4, F));

  // An explicit list that says sliding while no window is set means full attention.
  config_json["layer_types"] = {"full_attention", "sliding_attention", "full_attention",
                                "full_attention"};
  EXPECT_EQ(parse_ok(config_json).layer_types, std::vector<LayerType>(4, F));
}

TEST(HfConfig, MistralWindowCoversEveryLayerAndDefaultsTo4096) {
  json config_json = json::parse(kQwen3V5);
  config_json["model_type"] = "mistral";
  config_json["architectures"] = {"MistralForCausalLM"};
  config_json.erase("layer_types");
  config_json["sliding_window"] = 128;
  ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.sliding_window, 128);
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{S, S}));
  // Absent: MistralConfig's default window (4096); null (Mistral-7B-v0.2 onwards): plain causal.
  config_json.erase("sliding_window");
  config = parse_ok(config_json);
  EXPECT_EQ(config.sliding_window, 4096);
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{S, S}));
  config_json["sliding_window"] = nullptr;
  config = parse_ok(config_json);
  EXPECT_FALSE(config.sliding_window.has_value());
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{F, F}));
}

// google/gemma-3-4b-it's text_config (v4 form): rope_scaling applies to global layers only, local
// layers rotate with rope_local_base_freq, the 5:1 pattern from sliding_window_pattern.
TEST(HfConfig, Gemma3V4FormOfAVisionLanguageCheckpoint) {
  const json config_json = json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "torch_dtype": "bfloat16",
    "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
      "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
      "vocab_size": 262208, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "sliding_window": 1024, "sliding_window_pattern": 6,
      "query_pre_attn_scalar": 256, "hidden_activation": "gelu_pytorch_tanh"},
    "vision_config": {"model_type": "siglip_vision_model"}})");
  const ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(config.rope.type, "linear");
  EXPECT_EQ(config.rope.factor, 8.0);
  EXPECT_EQ(config.rope.theta, 1e6);
  ASSERT_TRUE(config.rope_local.has_value());
  EXPECT_EQ(config.rope_local->type, "default");
  EXPECT_EQ(config.rope_local->theta, 10000.0);
  EXPECT_EQ(config.sliding_window, 1024);
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{S, S, S, S, S, F, S, S, S, S, S, F}));
  EXPECT_EQ(config.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(config.hidden_act, "gelu_pytorch_tanh");
  EXPECT_FALSE(config.attn_logit_softcapping.has_value());
  EXPECT_FALSE(config.final_logit_softcapping.has_value());
}

// transformers v5 writes one RoPE dict per layer type.
TEST(HfConfig, Gemma3V5FormNestsRopePerLayerType) {
  const json config_json = json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512,
    "head_dim": 32, "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8,
    "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  const ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.rope.type, "linear");
  EXPECT_EQ(config.rope.theta, 1e6);
  ASSERT_TRUE(config.rope_local.has_value());
  EXPECT_EQ(config.rope_local->theta, 1e4);
  EXPECT_EQ(config.rope_local->type, "default");
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{S, F}));
  EXPECT_EQ(config.query_pre_attn_scalar, 256.0);  // Gemma3TextConfig's default
}

// Gemma2Config's defaults: alternating layers (even ones slide), soft-caps 50 and 30, window 4096;
// an explicit null turns a soft-cap off.
TEST(HfConfig, Gemma2DefaultsAndExplicitNulls) {
  json config_json = json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512,
    "hidden_act": "gelu_pytorch_tanh"})");
  ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{S, F, S, F}));
  EXPECT_EQ(config.sliding_window, 4096);
  EXPECT_EQ(config.attn_logit_softcapping, 50.0);
  EXPECT_EQ(config.final_logit_softcapping, 30.0);
  EXPECT_EQ(config.query_pre_attn_scalar, 256.0);
  config_json["attn_logit_softcapping"] = nullptr;
  config_json["final_logit_softcapping"] = 25.0;
  config = parse_ok(config_json);
  EXPECT_FALSE(config.attn_logit_softcapping.has_value());
  EXPECT_EQ(config.final_logit_softcapping, 25.0);
}

// meta-llama/Llama-3.2-1B (v4 form) and its llama3 RoPE scaling; attention_bias / mlp_bias.
TEST(HfConfig, Llama3RopeScalingAndBiases) {
  json config_json = json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 128256, "rope_theta": 500000.0, "attention_bias": true, "mlp_bias": false,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  const ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.rope.type, "llama3");
  EXPECT_EQ(config.rope.factor, 32.0);
  EXPECT_EQ(config.rope.low_freq_factor, 1.0);
  EXPECT_EQ(config.rope.high_freq_factor, 4.0);
  EXPECT_EQ(config.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(config.rope.theta, 500000.0);
  EXPECT_TRUE(config.attention_bias);
  EXPECT_FALSE(config.mlp_bias);
  EXPECT_FALSE(config.rope_local.has_value());
  EXPECT_EQ(config.layer_types, std::vector<LayerType>(16, F));
}

TEST(HfConfig, DefaultsForNullAndAbsentFields) {
  json config_json = json::parse(kQwen3V5);
  config_json["num_key_value_heads"] = nullptr;
  config_json["head_dim"] = nullptr;
  ModelConfig config = parse_ok(config_json);
  EXPECT_EQ(config.num_key_value_heads, 4);
  EXPECT_EQ(config.head_dim, 16);  // null: hidden_size / num_attention_heads

  // Absent in a qwen3 config: Qwen3Config's own default, as transformers reads it.
  config_json.erase("head_dim");
  EXPECT_EQ(parse_ok(config_json).head_dim, 128);
  config_json["model_type"] = "llama";
  EXPECT_EQ(parse_ok(config_json).head_dim, 16);

  config_json = json::parse(kQwen3V5);
  for (const char* key : {"dtype", "rope_parameters", "rms_norm_eps", "hidden_act",
                          "tie_word_embeddings", "eos_token_id", "layer_types"}) {
    config_json.erase(key);
  }
  config = parse_ok(config_json);
  EXPECT_EQ(config.dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(config.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, 1e-6);
  EXPECT_EQ(config.hidden_act, "silu");
  EXPECT_FALSE(config.tie_word_embeddings);
  EXPECT_TRUE(config.eos_token_ids.empty());
  EXPECT_EQ(config.layer_types, (std::vector<LayerType>{F, F}));
}

TEST(HfConfig, EosTokenIdForms) {
  json config_json = json::parse(kQwen3V5);
  config_json["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(parse_ok(config_json).eos_token_ids, (std::vector<int64_t>{151645, 151643}));
  config_json["eos_token_id"] = 2;
  EXPECT_EQ(parse_ok(config_json).eos_token_ids, (std::vector<int64_t>{2}));
  config_json["eos_token_id"] = "</s>";
  EXPECT_EQ(parse_error(config_json),
            "[config] config.json: field 'eos_token_id' must be an integer or a list of integers, "
            "got \"</s>\"");
}

TEST(HfConfig, RopeScalingV4AndV5) {
  json v4 = json::parse(kQwen3V4);
  v4["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig config = parse_ok(v4);
  EXPECT_EQ(config.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(config.rope.factor, 4.0);
  EXPECT_EQ(config.rope.original_max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e6);
  EXPECT_FALSE(config.rope.attention_factor.has_value());

  json v5 = json::parse(kQwen3V5);
  v5["rope_parameters"] = {{"rope_type", "yarn"},
                           {"rope_theta", 1e6},
                           {"factor", 2},
                           {"beta_fast", 16},
                           {"beta_slow", 2},
                           {"attention_factor", 1.5},
                           {"original_max_position_embeddings", 4096}};
  config = parse_ok(v5);
  EXPECT_EQ(config.rope.type, "yarn");
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(config.rope.factor, 2.0);
  EXPECT_DOUBLE_EQ(config.rope.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(config.rope.beta_slow, 2.0);
  EXPECT_EQ(config.rope.attention_factor, 1.5);
  EXPECT_EQ(config.rope.original_max_position_embeddings, 4096);

  // rope_parameters (v5) wins over the top-level v4 keys when a config has both.
  v5["rope_theta"] = 123.0;
  v5["partial_rotary_factor"] = 0.5;
  v5["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}};
  config = parse_ok(v5);
  EXPECT_DOUBLE_EQ(config.rope.theta, 1e7);
  EXPECT_DOUBLE_EQ(config.rope.partial_rotary_factor, 0.25);

  // Per-layer-type rope_parameters: the full-attention entry.
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  EXPECT_DOUBLE_EQ(parse_ok(v5).rope.theta, 1e6);

  v5["rope_parameters"] = {{"rope_theta", "big"}};
  EXPECT_EQ(
      parse_error(v5),
      "[config] config.json: field 'rope_parameters.rope_theta' must be a number, got \"big\"");
  v5["rope_parameters"] = {{"partial_rotary_factor", 1.5}};
  EXPECT_EQ(parse_error(v5),
            "[config] config.json: partial_rotary_factor must be in (0, 1], got 1.5");
  v5["rope_parameters"] = "default";
  EXPECT_EQ(parse_error(v5),
            "[config] config.json: field 'rope_parameters' must be an object, got \"default\"");
}

TEST(HfConfig, MissingRequiredFields) {
  for (const char* key : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "architectures"}) {
    json config_json = json::parse(kQwen3V4);
    config_json.erase(key);
    EXPECT_EQ(parse_error(config_json),
              fmt::format("[config] config.json: missing required field '{}'", key));
    config_json[key] = nullptr;  // null counts as missing
    EXPECT_EQ(parse_error(config_json),
              fmt::format("[config] config.json: missing required field '{}'", key));
  }
}

TEST(HfConfig, WrongTypesNameTheFieldAndType) {
  const auto error_with = [](const char* key, const json& value) {
    json config_json = json::parse(kQwen3V4);
    config_json[key] = value;
    return parse_error(config_json);
  };
  EXPECT_EQ(error_with("hidden_size", "1024"),
            "[config] config.json: field 'hidden_size' must be an integer, got \"1024\"");
  EXPECT_EQ(error_with("num_attention_heads", 16.5),
            "[config] config.json: field 'num_attention_heads' must be an integer, got 16.5");
  EXPECT_EQ(error_with("tie_word_embeddings", "yes"),
            "[config] config.json: field 'tie_word_embeddings' must be true or false, got \"yes\"");
  EXPECT_EQ(error_with("rms_norm_eps", json::array()),
            "[config] config.json: field 'rms_norm_eps' must be a number, got []");
  EXPECT_EQ(error_with("model_type", 3),
            "[config] config.json: field 'model_type' must be a string, got 3");
  EXPECT_EQ(
      error_with("architectures", json::array()),
      "[config] config.json: field 'architectures' must be a non-empty list of strings, got []");
  EXPECT_EQ(error_with("hidden_size", 0),
            "[config] config.json: field 'hidden_size' must be ≥ 1, got 0");
  EXPECT_EQ(
      error_with("num_key_value_heads", 3),
      "[config] config.json: field 'num_key_value_heads' (3) must divide num_attention_heads (16)");
  EXPECT_EQ(error_with("torch_dtype", "float64"),
            "[config] config.json: field 'torch_dtype' is \"float64\"; pagellm runs float32, "
            "bfloat16 and float16");
  EXPECT_EQ(error_with("layer_types", json{"full_attention"}),
            "[config] config.json: field 'layer_types' has 1 entries but num_hidden_layers is 28");
  json bad_types = std::vector<std::string>(28, "full_attention");
  bad_types[5] = "local_attention";
  EXPECT_EQ(error_with("layer_types", bad_types),
            "[config] config.json: field 'layer_types' [5] is \"local_attention\"; expected "
            "\"full_attention\", \"sliding_attention\" or \"linear_attention\"");
  EXPECT_EQ(error_with("text_config", 5),
            "[config] config.json: field 'text_config' must be an object, got 5");
  // Integral floats are integers (some writers emit 1024.0).
  json config_json = json::parse(kQwen3V4);
  config_json["hidden_size"] = 1024.0;
  EXPECT_EQ(parse_ok(config_json).hidden_size, 1024);
}

TEST(HfConfig, TextConfigFieldsAreNamedAsSuch) {
  json config_json = json::parse(kQwen35Vlm);
  config_json["text_config"]["hidden_size"] = "wide";
  EXPECT_EQ(
      parse_error(config_json),
      "[config] config.json: field 'text_config.hidden_size' must be an integer, got \"wide\"");
  config_json = json::parse(kQwen35Vlm);
  config_json["text_config"]["rope_parameters"]["mrope_section"] = {11, "x"};
  EXPECT_EQ(
      parse_error(config_json),
      "[config] config.json: field 'text_config.rope_parameters.mrope_section' must be a list "
      "of integers, got [11,\"x\"]");
  config_json = json::parse(kQwen35Vlm);
  config_json["text_config"].erase("num_hidden_layers");
  EXPECT_EQ(parse_error(config_json),
            "[config] config.json: missing required field 'num_hidden_layers'");
}

TEST(HfConfig, LoadFromFile) {
  TempDir dir;
  write_text_file(dir.file("config.json"), kQwen3V4);
  auto config = load_model_config(dir.file("config.json"));
  ASSERT_TRUE(config.has_value()) << config.status().message();
  EXPECT_EQ(config->hidden_size, 1024);

  json missing = json::parse(kQwen3V4);
  missing.erase("hidden_size");
  write_text_file(dir.file("config.json"), missing.dump());
  EXPECT_EQ(load_model_config(dir.file("config.json")).status().message(),
            "[config] " + dir.file("config.json") + ": missing required field 'hidden_size'");

  write_text_file(dir.file("config.json"), "{\"vocab_size\": 12,");
  const Status bad_json = load_model_config(dir.file("config.json")).status();
  EXPECT_PRED2(has_substr, bad_json.message(),
               "[config] " + dir.file("config.json") + ": not valid JSON (");

  const Status absent = load_model_config(dir.file("nope.json")).status();
  EXPECT_EQ(absent.code(), StatusCode::kNotFound);
  EXPECT_EQ(absent.message(), "[config] cannot open " + dir.file("nope.json"));
}

TEST(HfConfig, LayerTypeNames) {
  EXPECT_EQ(layer_type_name(F), "full_attention");
  EXPECT_EQ(layer_type_name(S), "sliding_attention");
  EXPECT_EQ(layer_type_name(L), "linear_attention");
}

}  // namespace
}  // namespace pagellm
