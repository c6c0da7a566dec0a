// QuantConfig: config.json's "quantization_config", for the weight formats pagellm reads. Anything
// else is refused by name when the config is read (an unknown quant_method, static activation
// scales, act-order GPTQ, ...): a quantized checkpoint is never loaded as something it is not.
//
//   fp8   {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
//          "weight_block_size": [128, 128], "modules_to_not_convert": [...]}
//         weight [out, in] F8_E4M3 + weight_scale_inv [ceil(out/bn), ceil(in/bk)] (a dequant multiplier)
//   awq   {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemm"}
//         qweight [in, out/8] i32 (AutoAWQ's nibble order), qzeros [in/g, out/8] i32, scales [in/g, out]
//   gptq  {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": false,
//          "checkpoint_format": "gptq" | "gptq_v2"}
//         qweight [in/8, out] i32, qzeros [in/g, out/8] i32 (v1 stores zero - 1), scales [in/g, out], g_idx [in]
//   mxfp4 {"quant_method": "mxfp4", "modules_to_not_convert": [...]}   (gpt-oss: the MoE experts only)
//         *_blocks [E, out, in/32, 16] U8 (two e2m1 codes a byte, low nibble first), *_scales [E, out, in/32] U8 (e8m0)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pagellm {

enum class QuantMethod { kNone, kFp8, kAwq, kGptq, kMxfp4 };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  int64_t block_n = 128, block_k = 128;  // fp8: weight_block_size
  int64_t bits = 4;                      // awq, gptq
  int64_t group_size = 128;              // awq, gptq
  bool sym = true;                       // gptq
  bool gptq_v2 = false;                  // gptq: zeros stored as they are (v1 stores zero - 1)
  std::vector<std::string> modules_to_not_convert;
  // fp8 only: the checkpoint's weights are dense and pagellm quantizes the projections when it loads
  // them (--quantization fp8 on an unquantized checkpoint, as vLLM's online dynamic FP8).
  bool online = false;

  bool enabled() const { return method != QuantMethod::kNone; }
  // "fp8 (blocks 128x128)", "awq (4-bit, group 128)", ...; "none" when not quantized.
  std::string describe() const;
};

std::string_view quant_method_name(QuantMethod method);  // "none", "fp8", "awq", "gptq"

// --quantization as vLLM takes it: "" (the checkpoint's own), or a method that must match the
// checkpoint's quantization_config, except "fp8" on an unquantized checkpoint, which quantizes its
// projections at load (block-scaled 128 x 128). Anything else is a one-line error naming both.
Expected<QuantConfig> apply_quantization_flag(const QuantConfig& checkpoint, const std::string& flag);

// Parses a quantization_config object; `source` names the config in messages.
Expected<QuantConfig> parse_quant_config(const nlohmann::json& quantization_config, const std::string& source);

}  // namespace pagellm
