#include "model/make_model.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "io/safetensors.h"

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
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> table = {
      // The shape of Qwen3-0.6B (spec/models.md A.1): 596 M parameters.
      {"qwen3-0.6b", {"Qwen3ForCausalLM", "qwen3", 151936, 1024, 3072, 28, 16, 8, 128, true, 1e6, 40960, true}},
      // The embedded demo: real Qwen3 vocabulary, tiny body (answers in milliseconds on a CPU).
      {"qwen3-tiny", {"Qwen3ForCausalLM", "qwen3", 151936, 64, 128, 2, 4, 2, 32, true, 1e6, 40960, true}},
      // No tokenizer: tests that need a very small model.
      {"qwen3-micro", {"Qwen3ForCausalLM", "qwen3", 512, 64, 128, 2, 4, 2, 32, false, 1e6, 4096, false}},
  };
  return table;
}

// splitmix64: a tiny integer PRNG whose output is the same everywhere.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
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
  SplitMix64 rng{seed * 0x2545f4914f6cdd1dull ^ name_hash(name)};
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = center + half_width * rng.uniform_pm1();
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * dtype_size_bytes(dtype));
  convert_from_f32(values.data(), bytes.data(), dtype, values.size());
  return bytes;
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
  c["use_sliding_window"] = false;
  c["dtype"] = dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
  if (has_tokenizer) {
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151645;
  } else {
    c["eos_token_id"] = nullptr;
  }
  c["pagellm_random_weights"] = true;
  return c;
}

void add_qwen3_tensors(SafetensorsWriter& writer, const Preset& p, const MakeModelOptions& o) {
  const float half_width = static_cast<float>(o.weight_std * std::sqrt(3.0));  // uniform std -> half width
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    writer.add(name, o.dtype, {rows, cols}, random_bytes(name, rows * cols, o.seed, o.dtype, 0.0f, half_width));
  };
  // Norm weights near 1 but not exactly 1, so a plain-vs-(1+w) mix-up cannot hide.
  auto norm = [&](const std::string& name, int64_t size) {
    writer.add(name, o.dtype, {size}, random_bytes(name, size, o.seed, o.dtype, 1.0f, 0.1f));
  };
  const int64_t h = p.hidden_size, hd = p.head_dim;
  matrix("model.embed_tokens.weight", p.vocab_size, h);
  norm("model.norm.weight", h);
  if (!p.tie_word_embeddings) matrix("lm_head.weight", p.vocab_size, h);
  for (int64_t i = 0; i < p.num_layers; ++i) {
    const std::string l = fmt::format("model.layers.{}.", i);
    norm(l + "input_layernorm.weight", h);
    norm(l + "post_attention_layernorm.weight", h);
    matrix(l + "self_attn.q_proj.weight", p.num_heads * hd, h);
    matrix(l + "self_attn.k_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.v_proj.weight", p.num_kv_heads * hd, h);
    matrix(l + "self_attn.o_proj.weight", h, p.num_heads * hd);
    norm(l + "self_attn.q_norm.weight", hd);
    norm(l + "self_attn.k_norm.weight", hd);
    matrix(l + "mlp.gate_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.up_proj.weight", p.intermediate_size, h);
    matrix(l + "mlp.down_proj.weight", h, p.intermediate_size);
  }
}

Status write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return invalid_argument("[make-model] cannot write {}", path.string());
  return Status::ok();
}

}  // namespace

std::vector<std::string> make_model_presets() {
  std::vector<std::string> names;
  for (const auto& [name, preset] : presets()) names.push_back(name);
  return names;
}

Status make_model(const MakeModelOptions& options) {
  const auto it = presets().find(options.preset);
  if (it == presets().end())
    return invalid_argument("[make-model] unknown preset '{}'; presets: {}", options.preset,
                            fmt::join(make_model_presets(), ", "));
  if (options.dtype != DType::kBF16 && options.dtype != DType::kF32 && options.dtype != DType::kF16)
    return invalid_argument("[make-model] dtype must be bf16, f16 or f32");
  const Preset& preset = it->second;
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
  add_qwen3_tensors(writer, preset, options);
  PAGELLM_RETURN_IF_ERROR(writer.write((fs::path(options.out_dir) / "model.safetensors").string()));
  return write_text(fs::path(options.out_dir) / "config.json",
                    config_json(preset, options.dtype, has_tokenizer).dump(2) + "\n");
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
