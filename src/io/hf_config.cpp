#include "io/hf_config.h"

#include <cmath>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pagellm {
namespace {

using nlohmann::json;

std::string short_dump(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// Typed access to the fields of one JSON object. Absent and null fields leave the output as it
// was (the default), unless required. `prefix` + key is how a field is named in messages; keys in
// `text_keys` came from text_config and are named "text_config.<key>".
class FieldReader {
 public:
  FieldReader(const json& object, std::string source, std::string prefix,
              const std::set<std::string>* text_keys = nullptr)
      : object_(object),
        source_(std::move(source)),
        prefix_(std::move(prefix)),
        text_keys_(text_keys) {}

  const json* find(std::string_view key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  bool contains(std::string_view key) const { return object_.contains(key); }

  std::string label(std::string_view key) const {
    if (text_keys_ != nullptr && text_keys_->contains(std::string(key))) {
      return fmt::format("text_config.{}", key);
    }
    return prefix_ + std::string(key);
  }

  Status missing(std::string_view key) const {
    return invalid_argument("[config] {}: missing required field '{}'", source_, label(key));
  }
  Status wrong_type(std::string_view key, std::string_view expected) const {
    return invalid_argument("[config] {}: field '{}' must be {}, got {}", source_, label(key),
                            expected, short_dump(*find(key)));
  }
  Status invalid(std::string_view key, std::string_view why) const {
    return invalid_argument("[config] {}: field '{}' {}", source_, label(key), why);
  }

  Status get_int(std::string_view key, int64_t* out, bool required = false) const {
    const json* value = find(key);
    if (value == nullptr) return required ? missing(key) : Status::ok();
    if (!as_int(*value, out)) return wrong_type(key, "an integer");
    return Status::ok();
  }
  Status get_optional_int(std::string_view key, std::optional<int64_t>* out) const {
    int64_t value = 0;
    if (!has(key)) return Status::ok();
    PAGELLM_RETURN_IF_ERROR(get_int(key, &value));
    *out = value;
    return Status::ok();
  }
  // An int field that must be ≥ 1 when present.
  Status get_positive_int(std::string_view key, int64_t* out, bool required = false) const {
    PAGELLM_RETURN_IF_ERROR(get_int(key, out, required));
    if (has(key) && *out < 1) return invalid(key, fmt::format("must be ≥ 1, got {}", *out));
    return Status::ok();
  }
  Status get_double(std::string_view key, double* out) const {
    const json* value = find(key);
    if (value == nullptr) return Status::ok();
    if (!value->is_number()) return wrong_type(key, "a number");
    *out = value->get<double>();
    return Status::ok();
  }
  Status get_optional_double(std::string_view key, std::optional<double>* out) const {
    double value = 0;
    if (!has(key)) return Status::ok();
    PAGELLM_RETURN_IF_ERROR(get_double(key, &value));
    *out = value;
    return Status::ok();
  }
  Status get_bool(std::string_view key, bool* out) const {
    const json* value = find(key);
    if (value == nullptr) return Status::ok();
    if (!value->is_boolean()) return wrong_type(key, "true or false");
    *out = value->get<bool>();
    return Status::ok();
  }
  Status get_string(std::string_view key, std::string* out) const {
    const json* value = find(key);
    if (value == nullptr) return Status::ok();
    if (!value->is_string()) return wrong_type(key, "a string");
    *out = value->get<std::string>();
    return Status::ok();
  }
  // A list of integers; with `allow_scalar` a single integer is read as a list of one.
  Status get_int_list(std::string_view key, std::vector<int64_t>* out,
                      bool allow_scalar = false) const {
    const json* value = find(key);
    if (value == nullptr) return Status::ok();
    const std::string_view expected =
        allow_scalar ? "an integer or a list of integers" : "a list of integers";
    std::vector<int64_t> list;
    int64_t item = 0;
    if (allow_scalar && as_int(*value, &item)) {
      list.push_back(item);
    } else if (value->is_array()) {
      for (const json& element : *value) {
        if (!as_int(element, &item)) return wrong_type(key, expected);
        list.push_back(item);
      }
    } else {
      return wrong_type(key, expected);
    }
    *out = std::move(list);
    return Status::ok();
  }
  // An object field, or nullptr when absent/null; an error when it is something else.
  Expected<const json*> get_object(std::string_view key) const {
    const json* value = find(key);
    if (value != nullptr && !value->is_object()) return wrong_type(key, "an object");
    return value;
  }

 private:
  // Integers, and floats holding an integer (1e6), are integers.
  static bool as_int(const json& value, int64_t* out) {
    if (value.is_number_integer()) {
      if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX}) return false;
      *out = value.get<int64_t>();
      return true;
    }
    if (value.is_number_float()) {
      const double number = value.get<double>();
      if (!std::isfinite(number) || number != std::floor(number) || std::fabs(number) > 9e15) {
        return false;
      }
      *out = static_cast<int64_t>(number);
      return true;
    }
    return false;
  }

  const json& object_;
  std::string source_;
  std::string prefix_;
  const std::set<std::string>* text_keys_;
};

// Fields shared by v4 rope_scaling and v5 rope_parameters.
Status read_rope_dict(const FieldReader& reader, RopeConfig* rope) {
  PAGELLM_RETURN_IF_ERROR(reader.get_string("type", &rope->type));  // v4's older spelling
  PAGELLM_RETURN_IF_ERROR(reader.get_string("rope_type", &rope->type));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("rope_theta", &rope->theta));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("factor", &rope->factor));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_int("original_max_position_embeddings", &rope->original_max_position_embeddings));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("beta_fast", &rope->beta_fast));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("beta_slow", &rope->beta_slow));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("truncate", &rope->truncate));
  PAGELLM_RETURN_IF_ERROR(reader.get_optional_double("attention_factor", &rope->attention_factor));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("partial_rotary_factor", &rope->partial_rotary_factor));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("low_freq_factor", &rope->low_freq_factor));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("high_freq_factor", &rope->high_freq_factor));
  PAGELLM_RETURN_IF_ERROR(reader.get_int_list("mrope_section", &rope->mrope_section));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("mrope_interleaved", &rope->mrope_interleaved));
  return Status::ok();
}

Status check_rope(const std::string& source, const RopeConfig& rope) {
  if (!(rope.theta > 0)) {
    return invalid_argument("[config] {}: rope_theta must be > 0, got {}", source, rope.theta);
  }
  if (!(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1)) {
    return invalid_argument("[config] {}: partial_rotary_factor must be in (0, 1], got {}", source,
                            rope.partial_rotary_factor);
  }
  return Status::ok();
}

// v4: top-level rope_theta / partial_rotary_factor / rope_scaling; v5: rope_parameters, which wins.
// Models whose layer types rotate differently (Gemma 3) nest one dict per layer type in v5
// ({"full_attention": {...}, "sliding_attention": {...}}); in v4 their sliding layers take
// rope_local_base_freq with default RoPE, and rope_scaling applies to full attention only.
Status read_rope(const FieldReader& reader, const std::string& source, ModelConfig* config) {
  RopeConfig* rope = &config->rope;
  PAGELLM_RETURN_IF_ERROR(reader.get_double("rope_theta", &rope->theta));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("partial_rotary_factor", &rope->partial_rotary_factor));
  const RopeConfig unscaled = *rope;
  PAGELLM_ASSIGN_OR_RETURN(const json* scaling, reader.get_object("rope_scaling"));
  if (scaling != nullptr) {
    PAGELLM_RETURN_IF_ERROR(
        read_rope_dict(FieldReader(*scaling, source, reader.label("rope_scaling") + "."), rope));
  }
  if (reader.has("rope_local_base_freq")) {
    RopeConfig local = unscaled;
    PAGELLM_RETURN_IF_ERROR(reader.get_double("rope_local_base_freq", &local.theta));
    config->rope_local = local;
  }
  PAGELLM_ASSIGN_OR_RETURN(const json* parameters, reader.get_object("rope_parameters"));
  if (parameters != nullptr) {
    const std::string prefix = reader.label("rope_parameters") + ".";
    const auto full = parameters->find("full_attention");
    const auto sliding = parameters->find("sliding_attention");
    if (full != parameters->end() && full->is_object()) {
      PAGELLM_RETURN_IF_ERROR(read_rope_dict(FieldReader(*full, source, prefix + "full_attention."), rope));
      if (sliding != parameters->end() && sliding->is_object()) {
        RopeConfig local = unscaled;
        PAGELLM_RETURN_IF_ERROR(
            read_rope_dict(FieldReader(*sliding, source, prefix + "sliding_attention."), &local));
        config->rope_local = local;
      }
    } else {
      PAGELLM_RETURN_IF_ERROR(read_rope_dict(FieldReader(*parameters, source, prefix), rope));
    }
  }
  // Gemma 3's sliding layers rotate with base 10,000 unless the config says otherwise.
  if (!config->rope_local && starts_with(config->model_type, "gemma3")) {
    config->rope_local = unscaled;
    config->rope_local->theta = 10000.0;
  }
  // Qwen2-VL era configs say "mrope" for what is default RoPE on text positions.
  if (rope->type == "mrope") rope->type = "default";
  PAGELLM_RETURN_IF_ERROR(check_rope(source, *rope));
  if (config->rope_local) PAGELLM_RETURN_IF_ERROR(check_rope(source, *config->rope_local));
  return Status::ok();
}

// Defaults of fields whose absence means a model-specific value in transformers' config classes.
struct FamilyDefaults {
  std::optional<int64_t> sliding_window;
  int64_t sliding_window_pattern = 0;  // layer i is sliding iff (i + 1) % pattern != 0; 0 = none
  bool all_layers_sliding = false;     // Mistral: the window applies to every layer
  std::optional<double> attn_logit_softcapping, final_logit_softcapping, query_pre_attn_scalar;
  std::string hidden_act = "silu";
};

FamilyDefaults family_defaults(std::string_view model_type) {
  FamilyDefaults d;
  if (model_type == "mistral") {
    d.sliding_window = 4096;
    d.all_layers_sliding = true;
  } else if (model_type == "gemma2") {
    d.sliding_window = 4096;
    d.sliding_window_pattern = 2;
    d.attn_logit_softcapping = 50.0;
    d.final_logit_softcapping = 30.0;
    d.query_pre_attn_scalar = 256.0;
    d.hidden_act = "gelu_pytorch_tanh";
  } else if (starts_with(model_type, "gemma3")) {
    d.sliding_window = 4096;
    d.sliding_window_pattern = 6;
    d.query_pre_attn_scalar = 256.0;
    d.hidden_act = "gelu_pytorch_tanh";
  }
  return d;
}

Expected<LayerType> parse_layer_type(std::string_view name) {
  if (name == "full_attention") return LayerType::kFullAttention;
  if (name == "sliding_attention") return LayerType::kSlidingAttention;
  if (name == "linear_attention") return LayerType::kLinearAttention;
  return invalid_argument("unknown layer type");
}

bool is_hybrid_model_type(std::string_view model_type) {
  return model_type == "qwen3_next" || starts_with(model_type, "qwen3_5");
}

// sliding_window and layer_types (A.8, B.2).
Status read_attention_pattern(const FieldReader& reader, const std::string& source, const FamilyDefaults& defaults,
                              ModelConfig* config) {
  const bool is_qwen = starts_with(config->model_type, "qwen");
  bool use_sliding_window = false;
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("use_sliding_window", &use_sliding_window));
  // Qwen configs carry a sliding_window value even when it is off; transformers drops it then.
  if (!is_qwen || use_sliding_window) {
    if (!reader.contains("sliding_window")) config->sliding_window = defaults.sliding_window;
    PAGELLM_RETURN_IF_ERROR(reader.get_optional_int("sliding_window", &config->sliding_window));
  }
  if (config->sliding_window && *config->sliding_window < 1) {
    return reader.invalid("sliding_window",
                          fmt::format("must be ≥ 1, got {}", *config->sliding_window));
  }
  const bool is_hybrid = is_hybrid_model_type(config->model_type);
  if (is_hybrid) {
    config->full_attention_interval = 4;
    PAGELLM_RETURN_IF_ERROR(
        reader.get_positive_int("full_attention_interval", &config->full_attention_interval));
  }
  const int64_t num_layers = config->num_hidden_layers;
  config->layer_types.assign(static_cast<size_t>(num_layers), LayerType::kFullAttention);
  if (const json* explicit_types = reader.find("layer_types")) {
    if (!explicit_types->is_array()) return reader.wrong_type("layer_types", "a list of strings");
    if (static_cast<int64_t>(explicit_types->size()) != num_layers) {
      return reader.invalid("layer_types", fmt::format("has {} entries but num_hidden_layers is {}",
                                                       explicit_types->size(), num_layers));
    }
    for (size_t i = 0; i < explicit_types->size(); ++i) {
      const json& name = (*explicit_types)[i];
      auto type = name.is_string() ? parse_layer_type(name.get<std::string>())
                                   : Expected<LayerType>(invalid_argument("not a string"));
      if (!type) {
        return reader.invalid("layer_types",
                              fmt::format("[{}] is {}; expected \"full_attention\", "
                                          "\"sliding_attention\" or \"linear_attention\"",
                                          i, short_dump(name)));
      }
      // transformers gives a sliding layer no window when sliding_window is unset: full attention.
      if (*type == LayerType::kSlidingAttention && !config->sliding_window) {
        *type = LayerType::kFullAttention;
      }
      config->layer_types[i] = *type;
    }
  } else if (is_hybrid) {
    for (int64_t i = 0; i < num_layers; ++i) {
      if ((i + 1) % config->full_attention_interval != 0) {
        config->layer_types[static_cast<size_t>(i)] = LayerType::kLinearAttention;
      }
    }
  } else if (config->sliding_window && defaults.all_layers_sliding) {
    config->layer_types.assign(static_cast<size_t>(num_layers), LayerType::kSlidingAttention);
  } else if (config->sliding_window && defaults.sliding_window_pattern > 0) {
    int64_t pattern = defaults.sliding_window_pattern;  // Gemma 3's v4 configs say sliding_window_pattern
    PAGELLM_RETURN_IF_ERROR(reader.get_positive_int("sliding_window_pattern", &pattern));
    for (int64_t i = 0; i < num_layers; ++i) {
      if ((i + 1) % pattern != 0) config->layer_types[static_cast<size_t>(i)] = LayerType::kSlidingAttention;
    }
  } else if (is_qwen && config->sliding_window) {
    int64_t max_window_layers = 28;  // Qwen2/Qwen3 config default
    PAGELLM_RETURN_IF_ERROR(reader.get_int("max_window_layers", &max_window_layers));
    for (int64_t i = max_window_layers < 0 ? 0 : max_window_layers; i < num_layers; ++i) {
      config->layer_types[static_cast<size_t>(i)] = LayerType::kSlidingAttention;
    }
  }
  return Status::ok();
}

Status read_dtype(const FieldReader& reader, ModelConfig* config) {
  // v5 writes "dtype", v4 "torch_dtype"; either may be absent (transformers then means float32).
  for (std::string_view key : {"dtype", "torch_dtype"}) {
    std::string name;
    PAGELLM_RETURN_IF_ERROR(reader.get_string(key, &name));
    if (name.empty()) continue;
    if (!parse_dtype(name, &config->dtype)) {
      return reader.invalid(
          key, fmt::format("is \"{}\"; pagellm runs float32, bfloat16 and float16", name));
    }
    return Status::ok();
  }
  return Status::ok();
}

Status read_sizes(const FieldReader& reader, const FamilyDefaults& defaults, ModelConfig* config) {
  PAGELLM_RETURN_IF_ERROR(reader.get_positive_int("vocab_size", &config->vocab_size, true));
  PAGELLM_RETURN_IF_ERROR(reader.get_positive_int("hidden_size", &config->hidden_size, true));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_positive_int("num_hidden_layers", &config->num_hidden_layers, true));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_positive_int("num_attention_heads", &config->num_attention_heads, true));
  PAGELLM_RETURN_IF_ERROR(reader.get_int("num_experts", &config->num_experts));
  // transformers 5 writes Qwen3-MoE's expert count as num_local_experts (released configs: num_experts).
  if (!reader.has("num_experts")) PAGELLM_RETURN_IF_ERROR(reader.get_int("num_local_experts", &config->num_experts));
  // A model whose every FFN is MoE may omit the dense width.
  PAGELLM_RETURN_IF_ERROR(reader.get_positive_int("intermediate_size", &config->intermediate_size,
                                                  /*required=*/config->num_experts <= 0));
  config->num_key_value_heads = config->num_attention_heads;
  PAGELLM_RETURN_IF_ERROR(
      reader.get_positive_int("num_key_value_heads", &config->num_key_value_heads));
  if (config->num_attention_heads % config->num_key_value_heads != 0) {
    return reader.invalid("num_key_value_heads",
                          fmt::format("({}) must divide num_attention_heads ({})",
                                      config->num_key_value_heads, config->num_attention_heads));
  }
  if (reader.has("head_dim")) {
    PAGELLM_RETURN_IF_ERROR(reader.get_positive_int("head_dim", &config->head_dim));
  } else if (config->model_type == "qwen3" && !reader.contains("head_dim")) {
    // Qwen3Config's default when the key is absent (null means derive), as transformers reads it.
    config->head_dim = 128;
  } else {
    if (config->hidden_size % config->num_attention_heads != 0) {
      return reader.invalid("hidden_size",
                            fmt::format("({}) is not a multiple of num_attention_heads ({}) and "
                                        "head_dim is not given",
                                        config->hidden_size, config->num_attention_heads));
    }
    config->head_dim = config->hidden_size / config->num_attention_heads;
  }
  PAGELLM_RETURN_IF_ERROR(
      reader.get_int("max_position_embeddings", &config->max_position_embeddings));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("rms_norm_eps", &config->rms_norm_eps));
  config->hidden_act = defaults.hidden_act;
  PAGELLM_RETURN_IF_ERROR(reader.get_string("hidden_act", &config->hidden_act));
  // Gemma's MLP reads hidden_activation (its configs may carry both).
  PAGELLM_RETURN_IF_ERROR(reader.get_string("hidden_activation", &config->hidden_act));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("attention_bias", &config->attention_bias));
  PAGELLM_RETURN_IF_ERROR(reader.get_double("swiglu_limit", &config->swiglu_limit));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("mlp_bias", &config->mlp_bias));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("tie_word_embeddings", &config->tie_word_embeddings));
  return Status::ok();
}

Status read_hybrid_and_moe(const FieldReader& reader, ModelConfig* config) {
  PAGELLM_RETURN_IF_ERROR(reader.get_int("linear_num_key_heads", &config->linear_num_key_heads));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_int("linear_num_value_heads", &config->linear_num_value_heads));
  PAGELLM_RETURN_IF_ERROR(reader.get_int("linear_key_head_dim", &config->linear_key_head_dim));
  PAGELLM_RETURN_IF_ERROR(reader.get_int("linear_value_head_dim", &config->linear_value_head_dim));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_int("linear_conv_kernel_dim", &config->linear_conv_kernel_dim));
  PAGELLM_RETURN_IF_ERROR(reader.get_int("num_experts_per_tok", &config->num_experts_per_tok));
  PAGELLM_RETURN_IF_ERROR(reader.get_int("moe_intermediate_size", &config->moe_intermediate_size));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_int("shared_expert_intermediate_size", &config->shared_expert_intermediate_size));
  PAGELLM_RETURN_IF_ERROR(reader.get_bool("norm_topk_prob", &config->norm_topk_prob));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_positive_int("decoder_sparse_step", &config->decoder_sparse_step));
  PAGELLM_RETURN_IF_ERROR(reader.get_int_list("mlp_only_layers", &config->mlp_only_layers));
  return Status::ok();
}

}  // namespace

std::string_view layer_type_name(LayerType type) {
  switch (type) {
    case LayerType::kFullAttention: return "full_attention";
    case LayerType::kSlidingAttention: return "sliding_attention";
    case LayerType::kLinearAttention: return "linear_attention";
  }
  return "?";
}

Expected<ModelConfig> parse_model_config(const nlohmann::json& config_json,
                                         const std::string& source) {
  if (!config_json.is_object()) {
    return invalid_argument("[config] {}: must be a JSON object, got {}", source,
                            short_dump(config_json));
  }
  ModelConfig config;
  const FieldReader top(config_json, source, "");
  const json* architectures = top.find("architectures");
  if (architectures == nullptr) return top.missing("architectures");
  if (architectures->is_array() && !architectures->empty() && (*architectures)[0].is_string()) {
    config.architecture = (*architectures)[0].get<std::string>();
  } else if (architectures->is_string()) {
    config.architecture = architectures->get<std::string>();
  } else {
    return top.wrong_type("architectures", "a non-empty list of strings");
  }

  // A VLM keeps the text model's fields under text_config: merge them over the top level.
  json merged = config_json;
  std::set<std::string> text_keys;
  PAGELLM_ASSIGN_OR_RETURN(const json* text_config, top.get_object("text_config"));
  if (text_config != nullptr) {
    for (const auto& [key, value] : text_config->items()) {
      if (key == "architectures") continue;  // the top level names the checkpoint's class
      merged[key] = value;
      text_keys.insert(key);
    }
  }
  const FieldReader reader(merged, source, "", &text_keys);

  PAGELLM_RETURN_IF_ERROR(reader.get_string("model_type", &config.model_type));
  const FamilyDefaults defaults = family_defaults(config.model_type);
  PAGELLM_RETURN_IF_ERROR(read_dtype(reader, &config));
  PAGELLM_RETURN_IF_ERROR(read_sizes(reader, defaults, &config));
  PAGELLM_RETURN_IF_ERROR(read_rope(reader, source, &config));
  PAGELLM_RETURN_IF_ERROR(read_attention_pattern(reader, source, defaults, &config));
  PAGELLM_RETURN_IF_ERROR(reader.get_int_list("eos_token_id", &config.eos_token_ids, true));
  PAGELLM_RETURN_IF_ERROR(reader.get_optional_int("bos_token_id", &config.bos_token_id));
  // A key present as null turns a default soft-cap off (transformers reads it as None).
  if (!reader.contains("attn_logit_softcapping")) config.attn_logit_softcapping = defaults.attn_logit_softcapping;
  if (!reader.contains("final_logit_softcapping")) config.final_logit_softcapping = defaults.final_logit_softcapping;
  config.query_pre_attn_scalar = defaults.query_pre_attn_scalar;
  PAGELLM_RETURN_IF_ERROR(
      reader.get_optional_double("attn_logit_softcapping", &config.attn_logit_softcapping));
  PAGELLM_RETURN_IF_ERROR(
      reader.get_optional_double("final_logit_softcapping", &config.final_logit_softcapping));
  PAGELLM_RETURN_IF_ERROR(reader.get_optional_double("query_pre_attn_scalar", &config.query_pre_attn_scalar));
  PAGELLM_RETURN_IF_ERROR(read_hybrid_and_moe(reader, &config));
  if (const auto it = merged.find("quantization_config"); it != merged.end() && !it->is_null()) {
    PAGELLM_ASSIGN_OR_RETURN(config.quantization, parse_quant_config(*it, source));
  }
  return config;
}

Expected<ModelConfig> load_model_config(const std::string& config_json_path) {
  std::ifstream in(config_json_path);
  if (!in) return not_found("[config] cannot open {}", config_json_path);
  json config_json;
  try {
    config_json = json::parse(in);
  } catch (const json::exception& error) {
    return invalid_argument("[config] {}: not valid JSON ({})", config_json_path, error.what());
  }
  return parse_model_config(config_json, config_json_path);
}

}  // namespace pagellm
