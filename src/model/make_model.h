// make-model: complete Hugging Face checkpoints (config.json, model.safetensors, tokenizer files)
// with deterministic random weights. Random weights cost exactly what trained ones cost to run, so
// these serve the demo, the tests and the benchmarks. Same preset + seed + dtype => the same bytes
// on any machine (integer PRNG, no libm in the weight path).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace pagellm {

struct MakeModelOptions {
  std::string preset = "qwen3-tiny";
  std::string out_dir;
  uint64_t seed = 0;
  DType dtype = DType::kBF16;
  std::string tokenizer_dir;  // copy tokenizer.json / tokenizer_config.json from here if non-empty
  double weight_std = 0.02;   // std of matrix entries (uniform distribution)
  // "" (dense), "fp8" (e4m3 in 128x128 blocks), "awq" (4-bit asymmetric) or "gptq" (4-bit symmetric):
  // the decoder layers' projections are written quantized from the same random weights (norms,
  // embeddings and the head stay in dtype), with config.json's quantization_config.
  std::string quantize;
  // awq / gptq group size; 0 = 128, or the largest of 64, 32 that divides every projection's inputs.
  int64_t group_size = 0;
  // Hybrid presets: write the MTP head (mtp.*) too (qwen3.5-0.8b always does, as the released model).
  bool mtp = false;
  // 0: the preset's decoder layers; otherwise this many, of the same shapes and layer-type pattern (a
  // cut-down model whose per-layer kernels cost what the full one's do, made and loaded in a fraction
  // of the time: for kernel measurements, not for end-to-end numbers).
  int64_t num_layers = 0;
};

std::vector<std::string> make_model_presets();
// The tokenizer family a preset's vocabulary is sized for ("qwen3", "llama3", "gemma3", "llama2"), or ""
// when it ships with none: the folder under default_tokenizer_assets_dir() that make-model copies.
std::string preset_tokenizer(const std::string& preset);
Status make_model(const MakeModelOptions& options);

// The folder holding the real tokenizers fetched by scripts/setup.sh (assets/tokenizers), or "".
std::string default_tokenizer_assets_dir();

// The embedded demo model (qwen3-tiny with the Qwen3 tokenizer), made on first use under
// $PAGELLM_CACHE or ~/.cache/pagellm. Returns its folder.
Expected<std::string> ensure_demo_model();

}  // namespace pagellm
