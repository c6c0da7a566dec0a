// config.json -> ModelConfig, accepting the forms transformers v4 and v5 write.
//
//   v4: top-level rope_theta, rope_scaling {type|rope_type, factor, ...}, partial_rotary_factor,
//       torch_dtype
//   v5: rope_parameters {rope_type, rope_theta, partial_rotary_factor, mrope_section, ...}, dtype
//   VLM (Qwen3.5): the text model's fields live under "text_config"; they win over top-level
//       fields of the same name, while "architectures" comes from the top level.
//
// Errors name the file and the field: "[config] config.json: missing required field
// 'hidden_size'", "[config] config.json: field 'num_attention_heads' must be an integer, got "16"".
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "io/model_config.h"

namespace pagellm {

Expected<ModelConfig> load_model_config(const std::string& config_json_path);
// `source` names the config in messages.
Expected<ModelConfig> parse_model_config(const nlohmann::json& config,
                                         const std::string& source = "config.json");

std::string_view layer_type_name(LayerType type);  // "full_attention", "sliding_attention", ...

}  // namespace pagellm
