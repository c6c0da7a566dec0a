#include "model/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "io/safetensors.h"
#include "model/quant_formats.h"

namespace pagellm {

namespace fs = std::filesystem;

namespace {

struct Preset {
  std::string architecture = "Qwen3ForCausalLM";
  std::string model_type = "qwen3";
  int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim;
  bool tie_word_embeddings;
  double rope_theta;
  int64_t max_position_embeddings;
  bool wants_tokenizer;  // vocabulary sized for the real Qwen3 tokenizer
  // Hybrid (qwen3_5_text) presets: layers [L, L, L, F] repeated, Gated DeltaNet sizes.
  int64_t linear_heads = 0, linear_head_dim = 0;
  // Dense families beyond Qwen3: config.json keys on top of the common ones, the tensors' shape
  // options, and the tokenizer (assets/tokenizers/<name>) and its special ids.
  nlohmann::ordered_json extra_config = nlohmann::ordered_json::object();
  bool qk_norm = true, qkv_bias = false, sandwich_norms = false, one_plus_norms = false;
  std::string tokenizer = "qwen3";
  // Sparse MoE FFN on every layer (Qwen3-MoE): experts, experts per token, each expert's width.
  int64_t num_experts = 0, experts_per_token = 0, moe_intermediate_size = 0;
  bool has_mtp = false;  // hybrid presets: the released model ships an MTP head (mtp.*)
  bool is_hybrid() const { return linear_heads > 0; }
  bool is_moe() const { return num_experts > 0; }
  bool is_gpt_oss() const { return model_type == "gpt_oss"; }
};

using Json = nlohmann::ordered_json;

// A dense-family preset: the real model's sizes, config keys and tokenizer.
Preset dense(std::string architecture, std::string model_type, std::vector<int64_t> sizes, bool tie, double theta,
             int64_t max_positions, Json extra, std::string tokenizer) {
  Preset p{std::move(architecture), std::move(model_type), sizes[0], sizes[1], sizes[2], sizes[3], sizes[4],
           sizes[5], sizes[6], tie, theta, max_positions, !tokenizer.empty()};
  p.extra_config = std::move(extra);
  p.tokenizer = std::move(tokenizer);
  p.qk_norm = false;
  return p;
}

Preset gemma(std::string model_type, std::vector<int64_t> sizes, Json extra) {
  Preset p = dense(model_type == "gemma2" ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM", model_type, std::move(sizes),
                   true, model_type == "gemma2" ? 10000.0 : 1e6, model_type == "gemma2" ? 8192 : 32768,
                   std::move(extra), model_type == "gemma2" ? "" : "gemma3");
  p.sandwich_norms = p.one_plus_norms = true;
  p.qk_norm = model_type != "gemma2";
  return p;
}

// A Qwen3-MoE preset: every layer sparse, experts renormalised over the top k.
Preset qwen3_moe(std::vector<int64_t> sizes, int64_t experts, int64_t top_k, int64_t width, std::string tokenizer) {
  Preset p = dense("Qwen3MoeForCausalLM", "qwen3_moe", std::move(sizes), false, 1e6, 40960,
                   {{"num_experts", experts}, {"num_experts_per_tok", top_k}, {"moe_intermediate_size", width},
                    {"decoder_sparse_step", 1}, {"mlp_only_layers", Json::array()}, {"norm_topk_prob", true}},
                   std::move(tokenizer));
  p.qk_norm = true;
  p.num_experts = experts;
  p.experts_per_token = top_k;
  p.moe_intermediate_size = width;
  return p;
}

// A gpt-oss preset: alternating sliding / full attention with sinks, q/k/v/o biases, YaRN, every
// layer a MoE of `experts` (top k, width = intermediate) with biases, written in the released MXFP4
// layout (quantization_config mxfp4).
Preset gpt_oss(std::vector<int64_t> sizes, int64_t experts, int64_t top_k, int64_t window, int64_t original_positions,
               std::string tokenizer) {
  std::vector<std::string> layer_types;
  for (int64_t i = 0; i < sizes[3]; ++i) layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  const Json rope = {{"rope_type", "yarn"}, {"rope_theta", 150000.0}, {"factor", 32.0}, {"beta_fast", 32.0},
                     {"beta_slow", 1.0}, {"truncate", false}, {"original_max_position_embeddings", original_positions}};
  const int64_t width = sizes[2];
  Preset p = dense("GptOssForCausalLM", "gpt_oss", std::move(sizes), false, 150000.0, 32 * original_positions,
                   {{"rope_parameters", rope}, {"sliding_window", window}, {"layer_types", layer_types},
                    {"num_local_experts", experts}, {"num_experts_per_tok", top_k}, {"attention_bias", true},
                    {"rms_norm_eps", 1e-5}, {"swiglu_limit", 7.0},
                    {"quantization_config",
                     {{"quant_method", "mxfp4"},
                      {"modules_to_not_convert",
                       {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}}}},
                   std::move(tokenizer));
  p.qkv_bias = true;
  p.num_experts = experts;
  p.experts_per_token = top_k;
  p.moe_intermediate_size = width;
  return p;
}

const Json kLlama31Rope = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
const Json kLlama32Rope = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = [] {
    std::map<std::string, Preset> t = {
        // The shape of Qwen3-0.6B (spec/models.md A.1): 596 M parameters.
        {"qwen3-0.6b", {"Qwen3ForCausalLM", "qwen3", 151936, 1024, 3072, 28, 16, 8, 128, true, 1e6, 40960, true}},
        // The shape of Qwen3-8B (8.2 B parameters, untied head): the size people serve, for the
        // quantization and GPU benchmarks.
        {"qwen3-8b", {"Qwen3ForCausalLM", "qwen3", 151936, 4096, 12288, 36, 32, 8, 128, false, 1e6, 40960, true}},
        // The shape of Qwen3-32B (32.8 B parameters, 65 GB in bf16): past one 80 GB GPU with a useful
        // KV cache, the tensor-parallel benchmark's model.
        {"qwen3-32b", {"Qwen3ForCausalLM", "qwen3", 151936, 5120, 25600, 64, 64, 8, 128, false, 1e6, 40960, true}},
        // The embedded demo: real Qwen3 vocabulary, tiny body (answers in milliseconds on a CPU).
        {"qwen3-tiny", {"Qwen3ForCausalLM", "qwen3", 151936, 64, 128, 2, 4, 2, 32, true, 1e6, 40960, true}},
        // No tokenizer: tests that need a very small model.
        {"qwen3-micro", {"Qwen3ForCausalLM", "qwen3", 512, 64, 128, 2, 4, 2, 32, false, 1e6, 4096, false}},
        // The shape of Qwen3.5-0.8B's text model (spec/models.md B.15): 24 layers [L, L, L, F] x 6, gated
        // attention 8/2 heads of 256, GDN 16/16 heads of 128, vocabulary 248320 (no tokenizer ships with it).
        {"qwen3.5-0.8b",
         {"Qwen3_5ForCausalLM", "qwen3_5_text", 248320, 1024, 3584, 24, 8, 2, 256, true, 1e7, 262144, false, 16, 128}},
        // A Qwen3.5 small enough for CPU tests (no tokenizer): layers [L, L, L, F], GDN 2 heads of 16.
        {"qwen3.5-micro",
         {"Qwen3_5ForCausalLM", "qwen3_5_text", 512, 64, 128, 4, 4, 2, 32, true, 1e7, 4096, false, 2, 16}},
    };
    t["qwen3.5-0.8b"].has_mtp = true;
    // sizes: vocab, hidden, intermediate, layers, heads, kv heads, head_dim
    // The shape of Qwen3-30B-A3B: 48 layers of 128 experts (top 8, width 768), 30.5 B parameters,
    // 3.3 B of them read per token.
    t["qwen3-30b-a3b"] = qwen3_moe({151936, 2048, 6144, 48, 32, 4, 128}, 128, 8, 768, "qwen3");
    // A Qwen3-MoE small enough for CPU tests (no tokenizer): 8 experts, top 2.
    t["qwen3-moe-micro"] = qwen3_moe({512, 64, 128, 2, 4, 2, 32}, 8, 2, 32, "");
    // The shape of gpt-oss-20b: 24 layers (sliding 128 / full), 64 query and 8 kv heads of 64, 32 experts
    // top 4 of width 2880 in MXFP4, vocabulary 201088 (the o200k harmony tokenizer).
    t["gpt-oss-20b"] = gpt_oss({201088, 2880, 2880, 24, 64, 8, 64}, 32, 4, 128, 4096, "gptoss");
    // A gpt-oss small enough for CPU tests (no tokenizer): window 8, 4 experts top 2 in MXFP4.
    t["gpt-oss-micro"] = gpt_oss({512, 64, 64, 2, 4, 2, 16}, 4, 2, 8, 64, "");
    t["llama3.2-1b"] = dense("LlamaForCausalLM", "llama", {128256, 2048, 8192, 16, 32, 8, 64}, true, 500000.0, 131072,
                             {{"rope_scaling", kLlama32Rope}}, "llama3");
    t["llama3.1-8b"] = dense("LlamaForCausalLM", "llama", {128256, 4096, 14336, 32, 32, 8, 128}, false, 500000.0,
                             131072, {{"rope_scaling", kLlama31Rope}}, "llama3");
    t["mistral-7b"] = dense("MistralForCausalLM", "mistral", {32768, 4096, 14336, 32, 32, 8, 128}, false, 1e6, 32768,
                            {{"sliding_window", nullptr}}, "llama2");
    Preset qwen25 = dense("Qwen2ForCausalLM", "qwen2", {151936, 896, 4864, 24, 14, 2, 64}, true, 1e6, 32768,
                          {{"use_sliding_window", false}, {"max_window_layers", 21}}, "qwen3");
    qwen25.qkv_bias = true;
    t["qwen2.5-0.5b"] = qwen25;
    t["gemma2-2b"] = gemma("gemma2", {256000, 2304, 9216, 26, 8, 4, 256},
                           {{"sliding_window", 4096}, {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0},
                            {"query_pre_attn_scalar", 256}, {"hidden_activation", "gelu_pytorch_tanh"}});
    t["gemma3-1b"] = gemma("gemma3_text", {262144, 1152, 6912, 26, 4, 1, 256},
                           {{"sliding_window", 512}, {"sliding_window_pattern", 6}, {"rope_local_base_freq", 10000.0},
                            {"query_pre_attn_scalar", 256}, {"hidden_activation", "gelu_pytorch_tanh"}});
    t["gemma3-4b"] = gemma("gemma3_text", {262208, 2560, 10240, 34, 8, 4, 256},
                           {{"sliding_window", 1024}, {"sliding_window_pattern", 6}, {"rope_local_base_freq", 10000.0},
                            {"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}},
                            {"query_pre_attn_scalar", 256}, {"hidden_activation", "gelu_pytorch_tanh"}});
    return t;
  }();
  return table;
}

// Special ids of the tokenizers the presets ship with.
void add_special_ids(Json& c, const std::string& tokenizer) {
  if (tokenizer == "qwen3") {
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151645;
  } else if (tokenizer == "llama3") {
    c["bos_token_id"] = 128000;
    c["eos_token_id"] = {128001, 128008, 128009};
  } else if (tokenizer == "gemma3") {
    c["bos_token_id"] = 2;
    c["eos_token_id"] = {1, 106};
  } else if (tokenizer == "gptoss") {
    c["bos_token_id"] = 199998;
    c["eos_token_id"] = {200002, 200012};  // <|return|>, <|call|>
  } else if (tokenizer == "llama2") {
    c["bos_token_id"] = 1;
    c["eos_token_id"] = 2;
  } else {
    c["eos_token_id"] = nullptr;
  }
}

// splitmix64: a tiny integer PRNG whose output is the same everywhere.
struct SplitMix64 {
  static constexpr uint64_t kIncrement = 0x9e3779b97f4a7c15ull;
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += kIncrement);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) from the top 24 bits: exact in f32, no rounding differences anywhere.
  float uniform_pm1() { return static_cast<float>(static_cast<int64_t>(next() >> 40) - (1 << 23)) / (1 << 23); }
};

uint64_t name_hash(const std::string& name) {  // FNV-1a: each tensor gets its own stream
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// center + half_width * U[-1, 1), rounded to dtype, as little-endian bytes.
std::vector<uint8_t> random_bytes(const std::string& name, int64_t count, uint64_t seed, DType dtype,
                                  float center, float half_width) {
  const uint64_t start = seed * 0x2545f4914f6cdd1dull ^ name_hash(name);
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * dtype_size_bytes(dtype));
  // SplitMix64's state after i draws is start + i * its increment, so chunks of the stream are made
  // in parallel and the bytes are those of one sequential walk (an 8B checkpoint in seconds, not minutes).
  constexpr int64_t kChunk = 1 << 16;
  ThreadPool::global().parallel_for((count + kChunk - 1) / kChunk, [&](int64_t first, int64_t last) {
    std::vector<float> values(static_cast<size_t>(kChunk));
    for (int64_t chunk = first; chunk < last; ++chunk) {
      const int64_t begin = chunk * kChunk, size = std::min(kChunk, count - begin);
      SplitMix64 rng{start + static_cast<uint64_t>(begin) * SplitMix64::kIncrement};
      for (int64_t i = 0; i < size; ++i) values[static_cast<size_t>(i)] = center + half_width * rng.uniform_pm1();
      convert_from_f32(values.data(), bytes.data() + static_cast<size_t>(begin) * dtype_size_bytes(dtype), dtype,
                       static_cast<size_t>(size));
    }
  });
  return bytes;
}

bool is_full_attention_layer(int64_t i) { return (i + 1) % 4 == 0; }

// The qwen3_5_text fields on top of the common ones, as transformers writes them.
void add_hybrid_config(nlohmann::ordered_json& c, const Preset& p) {
  std::vector<std::string> layer_types;
  for (int64_t i = 0; i < p.num_layers; ++i)
    layer_types.push_back(is_full_attention_layer(i) ? "full_attention" : "linear_attention");
  c["layer_types"] = layer_types;
  c["full_attention_interval"] = 4;
  c["linear_num_key_heads"] = p.linear_heads;
  c["linear_num_value_heads"] = p.linear_heads;
  c["linear_key_head_dim"] = p.linear_head_dim;
  c["linear_value_head_dim"] = p.linear_head_dim;
  c["linear_conv_kernel_dim"] = 4;
  c["attn_output_gate"] = true;
  c["mamba_ssm_dtype"] = "float32";
  c["partial_rotary_factor"] = 0.25;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", p.rope_theta}, {"partial_rotary_factor", 0.25},
                          {"mrope_section", {11, 11, 10}}, {"mrope_interleaved", true}};
  c.erase("use_sliding_window");
}

nlohmann::ordered_json config_json(const Preset& p, DType dtype, bool has_tokenizer) {
  nlohmann::ordered_json c;
  c["architectures"] = {p.architecture};
  c["model_type"] = p.model_type;
  c["vocab_size"] = p.vocab_size;
  c["hidden_size"] = p.hidden_size;
  c["intermediate_size"] = p.intermediate_size;
  c["num_hidden_layers"] = p.num_layers;
  c["num_attention_heads"] = p.num_heads;
  c["num_key_value_heads"] = p.num_kv_heads;
  c["head_dim"] = p.head_dim;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = 1e-6;
  c["max_position_embeddings"] = p.max_position_embeddings;
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", p.rope_theta}};
  c["tie_word_embeddings"] = p.tie_word_embeddings;
  c["attention_bias"] = false;
  if (p.model_type == "qwen3") c["use_sliding_window"] = false;
  c["dtype"] = dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
  add_special_ids(c, has_tokenizer ? p.tokenizer : "");
  for (const auto& [key, value] : p.extra_config.items()) {
    if (key == "rope_scaling") {  // v4 form beside rope_theta
      c.erase("rope_parameters");
      c["rope_theta"] = p.rope_theta;
    }
    c[key] = value;
  }
  if (p.is_hybrid()) add_hybrid_config(c, p);
  c["pagellm_random_weights"] = true;
  return c;
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> as_f16_bytes(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 2);
  convert_from_f32(values.data(), bytes.data(), DType::kF16, values.size());
  return bytes;
}

// A projection weight [rows, cols] in the format options.quantize names: the dense tensor's values
// (the same bytes a dense checkpoint of this seed holds), quantized as the published formats store them.
void add_projection(SafetensorsWriter& writer, const std::string& name, const std::vector<uint8_t>& dense_bytes,
                    int64_t rows, int64_t cols, const MakeModelOptions& o, int64_t group_size) {
  if (o.quantize.empty()) {
    writer.add(name, o.dtype, {rows, cols}, dense_bytes);
    return;
  }
  std::vector<float> w(static_cast<size_t>(rows * cols));
  convert_to_f32(dense_bytes.data(), o.dtype, w.data(), w.size());
  const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
  if (o.quantize == "fp8") {
    const Fp8BlockWeight q = quantize_fp8_block(w.data(), rows, cols, 128, 128);
    writer.add(prefix + ".weight", DType::kF8E4M3, {rows, cols}, q.weight);
    writer.add(prefix + ".weight_scale_inv", DType::kF32, {(rows + 127) / 128, (cols + 127) / 128}, as_bytes(q.scales));
    return;
  }
  const bool awq = o.quantize == "awq";
  const Int4Weight q = quantize_int4(w.data(), rows, cols, group_size, /*symmetric=*/!awq);
  const PackedInt4 packed = awq ? pack_awq(q) : pack_gptq(q, /*v2=*/false);
  const int64_t groups = cols / group_size;
  writer.add(prefix + ".qweight", DType::kI32, awq ? std::vector<int64_t>{cols, rows / 8} : std::vector<int64_t>{cols / 8, rows},
             as_bytes(packed.qweight));
  writer.add(prefix + ".qzeros", DType::kI32, {groups, rows / 8}, as_bytes(packed.qzeros));
  writer.add(prefix + ".scales", DType::kF16, {groups, rows}, as_f16_bytes(packed.scales));
  if (!awq) {
    std::vector<int32_t> g_idx(static_cast<size_t>(cols));
    for (int64_t k = 0; k < cols; ++k) g_idx[static_cast<size_t>(k)] = static_cast<int32_t>(k / group_size);
    writer.add(prefix + ".g_idx", DType::kI32, {cols}, as_bytes(g_idx));
  }
}

bool is_projection(const std::string& name) {
  for (const char* suffix : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                             "up_proj.weight", "down_proj.weight", "in_proj_qkv.weight", "in_proj_z.weight",
                             "in_proj_b.weight", "in_proj_a.weight", "out_proj.weight"})
    if (name.ends_with(suffix)) return true;
  return false;
}

// The input widths of a preset's projections (the group size must divide each).
std::vector<int64_t> projection_inputs(const Preset& p) {
  std::vector<int64_t> widths = {p.hidden_size, p.intermediate_size, p.num_heads * p.head_dim};
  if (p.is_hybrid()) widths.push_back(p.linear_heads * p.linear_head_dim);
  return widths;
}

int64_t int4_group_size(const Preset& p, const MakeModelOptions& o) {
  if (o.group_size > 0) return o.group_size;
  for (int64_t g : {128, 64, 32}) {
    bool divides = true;
    for (int64_t width : projection_inputs(p)) divides = divides && width % g == 0;
    if (divides) return g;
  }
  return 32;
}

nlohmann::ordered_json quantization_config(const std::string& quantize, int64_t group_size) {
  if (quantize == "fp8")
    return {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
            {"weight_block_size", {128, 128}}};
  if (quantize == "awq")
    return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", group_size}, {"zero_point", true},
            {"version", "gemm"}, {"modules_to_not_convert", nullptr}};
  return {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", group_size}, {"sym", true}, {"desc_act", false},
          {"checkpoint_format", "gptq"}};
}

// count random bytes in [lo, hi], one stream per tensor name (as random_bytes).
std::vector<uint8_t> random_u8(const std::string& name, int64_t count, uint64_t seed, int lo, int hi) {
  SplitMix64 rng{seed * 0x2545f4914f6cdd1dull ^ name_hash(name)};
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(lo + static_cast<int>(rng.next() % static_cast<uint64_t>(hi - lo + 1)));
  return bytes;
}

// gpt-oss's sinks, router and experts of layer prefix `l`, experts in the released MXFP4 layout:
// random e2m1 nibbles and e8m0 exponents 2^-7 .. 2^-5 (values up to ~0.19, the scale of trained ones).
void add_gpt_oss_layer_extras(SafetensorsWriter& writer, const Preset& p, const MakeModelOptions& o,
                              const std::string& l, float half_width) {
  const int64_t h = p.hidden_size, width = p.moe_intermediate_size, e = p.num_experts;
  auto dense = [&](const std::string& name, std::vector<int64_t> shape, float center, float w) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    writer.add(name, o.dtype, shape, random_bytes(name, count, o.seed, o.dtype, center, w));
  };
  auto mxfp4 = [&](const std::string& name, int64_t rows, int64_t cols) {
    writer.add(name + "_blocks", DType::kU8, {e, rows, cols / 32, 16}, random_u8(name + "_blocks", e * rows * cols / 2, o.seed, 0, 255));
    writer.add(name + "_scales", DType::kU8, {e, rows, cols / 32}, random_u8(name + "_scales", e * rows * cols / 32, o.seed, 120, 122));
  };
  dense(l + "self_attn.sinks", {p.num_heads}, 0.0f, 1.0f);
  dense(l + "mlp.router.weight", {e, h}, 0.0f, half_width);
  dense(l + "mlp.router.bias", {e}, 0.0f, half_width);
  mxfp4(l + "mlp.experts.gate_up_proj", 2 * width, h);
  dense(l + "mlp.experts.gate_up_proj_bias", {e, 2 * width}, 0.0f, half_width);
  mxfp4(l + "mlp.experts.down_proj", h, width);
  dense(l + "mlp.experts.down_proj_bias", {e, h}, 0.0f, half_width);
}

// Qwen3 and the other dense families (Llama, Mistral, Qwen2, Gemma), as the preset's options say.
void add_dense_tensors(SafetensorsWriter& writer, const Preset& p, const MakeModelOptions& o) {
  const float half_width = static_cast<float>(o.weight_std * std::sqrt(3.0));  // uniform std -> half width
  const int64_t group_size = int4_group_size(p, o);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::vector<uint8_t> bytes = random_bytes(name, rows * cols, o.seed, o.dtype, 0.0f, half_width);
    if (is_projection(name)) add_projection(writer, name, bytes, rows, cols, o, group_size);
    else writer.add(name, o.dtype, {rows, cols}, std::move(bytes));
  };
  auto vector = [&](const std::string& name, int64_t size, float center, float width) {
    writer.add(name, o.dtype, {size}, random_bytes(name, size, o.seed, o.dtype, center, width));
  };
  // Plain norm weights near 1, (1+w) ones near 0, not exactly, so a mix-up of the forms cannot hide.
  auto norm = [&](const std::string& name, int64_t size) { vector(name, size, p.one_plus_norms ? 0.0f : 1.0f, 0.1f); };
  const int64_t h = p.hidden_size, hd = p.head_dim;
  matrix("model.embed_tokens.weight", p.vocab_size, h);
  norm("model.norm.weight", h);
  if (!p.tie_word_embeddings) matrix("lm_head.weight", p.vocab_size, h);
  for (int64_t i = 0; i < p.num_layers; ++i) {
    const std::string l = fmt::format("model.layers.{}.", i);
    norm(l + "input_layernorm.weight", h);
    norm(l + "post_attention_layernorm.weight", h);
    if (p.sandwich_norms) {
      norm(l + "pre_feedforward_layernorm.weight", h);
      norm(l + "post_feedforward_layernorm.weight", h);
    }
    matrix(l + "self_attn.q_proj.weight", p.num_heads * hd, h);
    matrix(l + "self_attn.k_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.v_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.o_proj.weight", h, p.num_heads * hd);
    if (p.is_gpt_oss()) vector(l + "self_attn.o_proj.bias", h, 0.0f, half_width);
    if (p.qkv_bias) {
      vector(l + "self_attn.q_proj.bias", p.num_heads * hd, 0.0f, half_width);
      vector(l + "self_attn.k_proj.bias", p.num_kv_heads * hd, 0.0f, half_width);
      vector(l + "self_attn.v_proj.bias", p.num_kv_heads * hd, 0.0f, half_width);
    }
    if (p.qk_norm) {
      norm(l + "self_attn.q_norm.weight", hd);
      norm(l + "self_attn.k_norm.weight", hd);
    }
    if (p.is_gpt_oss()) {
      add_gpt_oss_layer_extras(writer, p, o, l, half_width);
      continue;
    }
    if (p.is_moe()) {  // released checkpoints' per-expert names
      matrix(l + "mlp.gate.weight", p.num_experts, h);
      for (int64_t e = 0; e < p.num_experts; ++e) {
        const std::string x = fmt::format("{}mlp.experts.{}.", l, e);
        writer.add(x + "gate_proj.weight", o.dtype, {p.moe_intermediate_size, h},
                   random_bytes(x + "gate_proj.weight", p.moe_intermediate_size * h, o.seed, o.dtype, 0.0f, half_width));
        writer.add(x + "up_proj.weight", o.dtype, {p.moe_intermediate_size, h},
                   random_bytes(x + "up_proj.weight", p.moe_intermediate_size * h, o.seed, o.dtype, 0.0f, half_width));
        writer.add(x + "down_proj.weight", o.dtype, {h, p.moe_intermediate_size},
                   random_bytes(x + "down_proj.weight", h * p.moe_intermediate_size, o.seed, o.dtype, 0.0f, half_width));
      }
      continue;
    }
    matrix(l + "mlp.gate_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.up_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.down_proj.weight", h, p.intermediate_size);
  }
}

// Qwen3.5 (spec/models.md B.14 names): (1+w) norms get offsets near 0, the GDN output norm weights near 1;
// the MTP head (mtp.*: its norms, fc [H, 2H] and one full-attention layer) when the preset or --mtp asks.
void add_qwen35_tensors(SafetensorsWriter& writer, const Preset& p, const MakeModelOptions& o) {
  const float half_width = static_cast<float>(o.weight_std * std::sqrt(3.0));
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float width) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    writer.add(name, o.dtype, shape, random_bytes(name, count, o.seed, o.dtype, center, width));
  };
  const int64_t group_size = int4_group_size(p, o);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    if (!is_projection(name)) return add(name, {rows, cols}, 0.0f, half_width);
    add_projection(writer, name, random_bytes(name, rows * cols, o.seed, o.dtype, 0.0f, half_width), rows, cols, o,
                   group_size);
  };
  auto offset_norm = [&](const std::string& name, int64_t size) { add(name, {size}, 0.0f, 0.1f); };
  const int64_t h = p.hidden_size, hd = p.head_dim, lh = p.linear_heads, ld = p.linear_head_dim;
  const int64_t key_dim = lh * ld, value_dim = lh * ld, conv_dim = 2 * key_dim + value_dim;
  matrix("model.embed_tokens.weight", p.vocab_size, h);
  offset_norm("model.norm.weight", h);
  auto attention_layer = [&](const std::string& l) {
    matrix(l + "self_attn.q_proj.weight", 2 * p.num_heads * hd, h);  // query and gate per head
    matrix(l + "self_attn.k_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.v_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.o_proj.weight", h, p.num_heads * hd);
    offset_norm(l + "self_attn.q_norm.weight", hd);
    offset_norm(l + "self_attn.k_norm.weight", hd);
  };
  auto norms_and_mlp = [&](const std::string& l) {
    offset_norm(l + "input_layernorm.weight", h);
    offset_norm(l + "post_attention_layernorm.weight", h);
    matrix(l + "mlp.gate_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.up_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.down_proj.weight", h, p.intermediate_size);
  };
  if (p.has_mtp || o.mtp) {
    offset_norm("mtp.pre_fc_norm_embedding.weight", h);
    offset_norm("mtp.pre_fc_norm_hidden.weight", h);
    offset_norm("mtp.norm.weight", h);
    matrix("mtp.fc.weight", h, 2 * h);
    attention_layer("mtp.layers.0.");
    norms_and_mlp("mtp.layers.0.");
  }
  for (int64_t i = 0; i < p.num_layers; ++i) {
    const std::string l = fmt::format("model.layers.{}.", i);
    norms_and_mlp(l);
    if (is_full_attention_layer(i)) {
      attention_layer(l);
    } else {
      const std::string g = l + "linear_attn.";
      matrix(g + "in_proj_qkv.weight", conv_dim, h);
      matrix(g + "in_proj_z.weight", value_dim, h);
      matrix(g + "in_proj_b.weight", lh, h);
      matrix(g + "in_proj_a.weight", lh, h);
      add(g + "conv1d.weight", {conv_dim, 1, 4}, 0.0f, 0.5f);
      add(g + "A_log", {lh}, 0.7f, 0.7f);    // decay rates exp(A_log) in [1, 4]
      add(g + "dt_bias", {lh}, 1.0f, 0.5f);
      add(g + "norm.weight", {ld}, 1.0f, 0.1f);  // plain weight
      matrix(g + "out_proj.weight", h, value_dim);
    }
  }
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return invalid_argument("[make-model] cannot write {}", path.string());
  return Status::ok();
}

}  // namespace

std::string preset_tokenizer(const std::string& preset) {
  const auto it = presets().find(preset);
  return it == presets().end() || !it->second.wants_tokenizer ? "" : it->second.tokenizer;
}

std::vector<std::string> make_model_presets() {
  std::vector<std::string> names;
  for (const auto& [name, preset] : presets()) names.push_back(name);
  return names;
}

namespace {

// The preset cut to (or grown to) `num_layers` decoder layers (0: as it is); an explicit per-layer
// pattern (gpt-oss's layer_types) repeats from its start, as the layers' own rule would.
Preset with_num_layers(Preset preset, int64_t num_layers) {
  if (num_layers == 0 || num_layers == preset.num_layers) return preset;
  if (preset.extra_config.contains("layer_types")) {
    const Json pattern = preset.extra_config["layer_types"];
    Json types = Json::array();
    for (int64_t i = 0; i < num_layers; ++i) types.push_back(pattern[static_cast<size_t>(i) % pattern.size()]);
    preset.extra_config["layer_types"] = types;
  }
  preset.num_layers = num_layers;
  return preset;
}

}  // namespace

Status make_model(const MakeModelOptions& options) {
  const auto it = presets().find(options.preset);
  if (it == presets().end())
    return invalid_argument("[make-model] unknown preset '{}'; presets: {}", options.preset,
                            fmt::join(make_model_presets(), ", "));
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF32 && options.dtype != DType::kF16)
    return invalid_argument("[make-model] dtype must be bf16, f16 or f32");
  if (options.num_layers < 0 || options.num_layers > 4096)
    return invalid_argument("[make-model] --num-layers {}: give 1 to 4096 (0 = the preset's {})", options.num_layers,
                            it->second.num_layers);
  const Preset preset = with_num_layers(it->second, options.num_layers);
  if (!options.quantize.empty() && options.quantize != "fp8" && options.quantize != "awq" && options.quantize != "gptq")
    return invalid_argument("[make-model] --quantize '{}' is not a format pagellm writes (fp8, awq or gptq)",
                            options.quantize);
  if (options.mtp && !preset.is_hybrid())
    return invalid_argument("[make-model] --mtp: preset '{}' has no MTP head (the hybrid qwen3.5 presets do)",
                            options.preset);
  if (!options.quantize.empty() && preset.is_moe())
    return invalid_argument("[make-model] --quantize is not available for MoE presets (pagellm reads quantized "
                            "attention, MLP and Gated DeltaNet projections, not quantized experts)");
  const int64_t group_size = int4_group_size(preset, options);
  if (options.quantize == "awq" || options.quantize == "gptq") {
    for (int64_t width : projection_inputs(preset))
      if (group_size % 8 != 0 || width % group_size != 0)
        return invalid_argument("[make-model] group size {} does not divide the preset's projection inputs ({})",
                                group_size, width);
  }
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return invalid_argument("[make-model] cannot create {}: {}", options.out_dir, ec.message());

  bool has_tokenizer = false;
  if (preset.wants_tokenizer && !options.tokenizer_dir.empty()) {
    for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
      const fs::path src = fs::path(options.tokenizer_dir) / file;
      if (!fs::exists(src)) continue;
      fs::copy_file(src, fs::path(options.out_dir) / file, fs::copy_options::overwrite_existing, ec);
      if (ec) return invalid_argument("[make-model] cannot copy {}: {}", src.string(), ec.message());
      has_tokenizer = true;
    }
  }
  SafetensorsWriter writer;
  if (preset.is_hybrid()) add_qwen35_tensors(writer, preset, options);
  else add_dense_tensors(writer, preset, options);
  PAGELLM_RETURN_IF_ERROR(writer.write((fs::path(options.out_dir) / "model.safetensors").string()));
  Json config = config_json(preset, options.dtype, has_tokenizer);
  if (preset.has_mtp || options.mtp) config["mtp_num_hidden_layers"] = 1;
  if (!options.quantize.empty()) config["quantization_config"] = quantization_config(options.quantize, group_size);
  return write_text(fs::path(options.out_dir) / "config.json", config.dump(2) + "\n");
}

std::string default_tokenizer_assets_dir() {
  if (const char* env = std::getenv("PAGELLM_ASSETS")) return (fs::path(env) / "tokenizers").string();
#ifdef PAGELLM_SOURCE_ASSETS
  if (fs::exists(PAGELLM_SOURCE_ASSETS)) return (fs::path(PAGELLM_SOURCE_ASSETS) / "tokenizers").string();
#endif
  return "";
}

Expected<std::string> ensure_demo_model() {
  fs::path cache_root;
  if (const char* env = std::getenv("PAGELLM_CACHE")) cache_root = env;
  else if (const char* home = std::getenv("HOME")) cache_root = fs::path(home) / ".cache" / "pagellm";
  else cache_root = fs::temp_directory_path() / "pagellm";
  const fs::path dir = cache_root / "demo-qwen3-tiny-v1";
  if (fs::exists(dir / "config.json")) return dir.string();
  const std::string tokenizers = default_tokenizer_assets_dir();
  MakeModelOptions options;
  options.preset = "qwen3-tiny";
  options.out_dir = (cache_root / "demo-qwen3-tiny-v1.partial").string();
  options.tokenizer_dir = tokenizers.empty() ? "" : (fs::path(tokenizers) / "qwen3").string();
  LOG_INFO("making the demo model (qwen3-tiny shape, RANDOM weights: its text is gibberish) in {}", dir.string());
  PAGELLM_RETURN_IF_ERROR(make_model(options));
  std::error_code ec;
  fs::rename(options.out_dir, dir, ec);
  if (ec && !fs::exists(dir / "config.json"))
    return invalid_argument("[make-model] cannot move the demo model into {}: {}", dir.string(), ec.message());
  return dir.string();
}

}  // namespace pagellm
