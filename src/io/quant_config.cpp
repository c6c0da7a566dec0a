#include "io/quant_config.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pagellm {

namespace {

using json = nlohmann::json;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// Reads the optional fields of one quantization_config object, with messages that name the field.
class QuantFields {
 public:
  QuantFields(const json& object, const std::string& source) : object_(object), source_(source) {}

  Status refuse(std::string_view field, std::string_view why) const {
    return invalid_argument("[config] {}: quantization_config.{} {}", source_, field, why);
  }
  Status get_string(const char* key, std::string* out) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Status::ok();
    if (!it->is_string()) return refuse(key, fmt::format("must be a string, got {}", it->dump()));
    *out = it->get<std::string>();
    return Status::ok();
  }
  Status get_int(const char* key, int64_t* out) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Status::ok();
    if (!it->is_number_integer()) return refuse(key, fmt::format("must be an integer, got {}", it->dump()));
    *out = it->get<int64_t>();
    return Status::ok();
  }
  Status get_bool(const char* key, bool* out) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean()) return refuse(key, fmt::format("must be true or false, got {}", it->dump()));
    *out = it->get<bool>();
    return Status::ok();
  }
  Status get_strings(const char* key, std::vector<std::string>* out) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Status::ok();
    if (!it->is_array()) return refuse(key, fmt::format("must be a list of strings, got {}", it->dump()));
    for (const json& item : *it) {
      if (!item.is_string()) return refuse(key, fmt::format("must be a list of strings, got {}", it->dump()));
      out->push_back(item.get<std::string>());
    }
    return Status::ok();
  }
  bool has(const char* key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  const json& at(const char* key) const { return object_.at(key); }

 private:
  const json& object_;
  const std::string& source_;
};

Status read_fp8(const QuantFields& fields, QuantConfig* config) {
  std::string fmt_name = "e4m3", activation_scheme = "dynamic";
  PAGELLM_RETURN_IF_ERROR(fields.get_string("fmt", &fmt_name));
  if (lower(fmt_name) != "e4m3")
    return fields.refuse("fmt", fmt::format("'{}' is not supported (pagellm reads float8 e4m3 weights)", fmt_name));
  PAGELLM_RETURN_IF_ERROR(fields.get_string("activation_scheme", &activation_scheme));
  if (activation_scheme != "dynamic")
    return fields.refuse("activation_scheme",
                         fmt::format("'{}' is not supported (pagellm scales FP8 activations dynamically, per "
                                     "token; static activation scales are not read)",
                                     activation_scheme));
  if (!fields.has("weight_block_size"))
    return fields.refuse("weight_block_size",
                         "is missing: per-tensor or per-channel FP8 weights are not supported (pagellm reads "
                         "block-scaled FP8, e.g. [128, 128])");
  const json& block = fields.at("weight_block_size");
  if (!block.is_array() || block.size() != 2 || !block[0].is_number_integer() || !block[1].is_number_integer() ||
      block[0].get<int64_t>() <= 0 || block[1].get<int64_t>() <= 0)
    return fields.refuse("weight_block_size", fmt::format("must be two positive integers, got {}", block.dump()));
  config->block_n = block[0].get<int64_t>();
  config->block_k = block[1].get<int64_t>();
  return fields.get_strings("modules_to_not_convert", &config->modules_to_not_convert);
}

Status read_int4_common(const QuantFields& fields, QuantConfig* config) {
  PAGELLM_RETURN_IF_ERROR(fields.get_int("bits", &config->bits));
  if (config->bits != 4)
    return fields.refuse("bits", fmt::format("{} is not supported (pagellm reads 4-bit AWQ and GPTQ)", config->bits));
  PAGELLM_RETURN_IF_ERROR(fields.get_int("group_size", &config->group_size));
  if (config->group_size <= 0 || config->group_size % 8 != 0)
    return fields.refuse("group_size",
                         fmt::format("{} is not supported (pagellm reads groups of a positive multiple of 8 "
                                     "input channels; per-channel -1 is not read)",
                                     config->group_size));
  return Status::ok();
}

Status read_awq(const QuantFields& fields, QuantConfig* config) {
  PAGELLM_RETURN_IF_ERROR(read_int4_common(fields, config));
  bool zero_point = true;
  PAGELLM_RETURN_IF_ERROR(fields.get_bool("zero_point", &zero_point));
  if (!zero_point) return fields.refuse("zero_point", "false is not supported (pagellm reads AWQ with zero points)");
  std::string version = "gemm";
  PAGELLM_RETURN_IF_ERROR(fields.get_string("version", &version));
  if (lower(version) != "gemm")
    return fields.refuse("version", fmt::format("'{}' is not supported (pagellm reads the AWQ GEMM layout)", version));
  return fields.get_strings("modules_to_not_convert", &config->modules_to_not_convert);
}

Status read_gptq(const QuantFields& fields, QuantConfig* config) {
  PAGELLM_RETURN_IF_ERROR(read_int4_common(fields, config));
  bool desc_act = false;
  PAGELLM_RETURN_IF_ERROR(fields.get_bool("desc_act", &desc_act));
  if (desc_act)
    return fields.refuse("desc_act", "true (act-order) is not supported (pagellm reads GPTQ with desc_act false)");
  PAGELLM_RETURN_IF_ERROR(fields.get_bool("sym", &config->sym));
  std::string format = "gptq";
  PAGELLM_RETURN_IF_ERROR(fields.get_string("checkpoint_format", &format));
  if (format != "gptq" && format != "gptq_v2")
    return fields.refuse("checkpoint_format", fmt::format("'{}' is not supported (pagellm reads gptq and gptq_v2)", format));
  config->gptq_v2 = format == "gptq_v2";
  return Status::ok();
}

}  // namespace

std::string_view quant_method_name(QuantMethod method) {
  switch (method) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kFp8: return "fp8";
    case QuantMethod::kAwq: return "awq";
    case QuantMethod::kGptq: return "gptq";
    case QuantMethod::kMxfp4: return "mxfp4";
  }
  return "?";
}

std::string QuantConfig::describe() const {
  switch (method) {
    case QuantMethod::kNone: return "none";
    case QuantMethod::kFp8:
      return fmt::format("fp8 (e4m3 weights in {}x{} blocks{})", block_n, block_k, online ? ", quantized at load" : "");
    case QuantMethod::kAwq: return fmt::format("awq ({}-bit, group {})", bits, group_size);
    case QuantMethod::kGptq:
      return fmt::format("gptq ({}-bit, group {}, {})", bits, group_size, sym ? "symmetric" : "asymmetric");
    case QuantMethod::kMxfp4: return "mxfp4 (e2m1 MoE experts, e8m0 scales per 32)";
  }
  return "?";
}

Expected<QuantConfig> parse_quant_config(const json& quantization_config, const std::string& source) {
  if (!quantization_config.is_object())
    return invalid_argument("[config] {}: quantization_config must be an object, got {}", source,
                            quantization_config.dump());
  const QuantFields fields(quantization_config, source);
  std::string method;
  PAGELLM_RETURN_IF_ERROR(fields.get_string("quant_method", &method));
  if (method.empty()) return fields.refuse("quant_method", "is missing");
  QuantConfig config;
  const std::string name = lower(method);
  if (name == "fp8") {
    config.method = QuantMethod::kFp8;
    PAGELLM_RETURN_IF_ERROR(read_fp8(fields, &config));
  } else if (name == "awq") {
    config.method = QuantMethod::kAwq;
    PAGELLM_RETURN_IF_ERROR(read_awq(fields, &config));
  } else if (name == "gptq") {
    config.method = QuantMethod::kGptq;
    PAGELLM_RETURN_IF_ERROR(read_gptq(fields, &config));
  } else if (name == "mxfp4") {
    // gpt-oss: the MoE experts' *_blocks / *_scales; everything else (modules_to_not_convert) is dense.
    config.method = QuantMethod::kMxfp4;
    PAGELLM_RETURN_IF_ERROR(fields.get_strings("modules_to_not_convert", &config.modules_to_not_convert));
  } else {
    return fields.refuse("quant_method",
                         fmt::format("'{}' is not supported (pagellm reads fp8, awq, gptq and mxfp4 checkpoints)", method));
  }
  return config;
}

Expected<QuantConfig> apply_quantization_flag(const QuantConfig& checkpoint, const std::string& flag) {
  if (flag.empty()) return checkpoint;
  const std::string name = lower(flag);
  if (name != "fp8" && name != "awq" && name != "gptq" && name != "mxfp4")
    return invalid_argument("[engine] --quantization '{}' is not one of fp8, awq, gptq, mxfp4", flag);
  if (checkpoint.enabled()) {
    if (quant_method_name(checkpoint.method) == name) return checkpoint;
    return invalid_argument("[engine] --quantization {} does not match the checkpoint's quantization_config ({})", name,
                            checkpoint.describe());
  }
  if (name != "fp8")
    return invalid_argument("[engine] --quantization {} needs a checkpoint quantized with {} (its config.json has no "
                            "quantization_config); pagellm quantizes unquantized checkpoints to fp8 only",
                            name, name);
  QuantConfig online;
  online.method = QuantMethod::kFp8;
  online.online = true;
  return online;
}

}  // namespace pagellm
