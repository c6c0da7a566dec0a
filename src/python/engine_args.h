// Engine keyword arguments of the Python `LLM(...)` -> EngineConfig, through the CLI's own engine
// flags (add_engine_options): `max_model_len="32k"` parses as `--max-model-len 32k` does, so every
// engine flag of `pagellm serve` / `generate` is a keyword with the same conversions and checks.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_config.h"

namespace pagellm::python {

// One keyword: a bool turns a flag on (--enable-prefix-caching) or off (--no-enable-prefix-caching);
// anything else is given as text after its option (--max-num-seqs 8).
struct EngineArg {
  std::string name;  // the Python keyword: max_num_seqs
  bool is_bool = false;
  bool bool_value = false;
  std::string text;
};

// The keywords engine_config_from_args accepts (python spelling, without the no_ forms).
std::vector<std::string> engine_arg_names();
// An unknown keyword is kNotFound ("unexpected keyword argument 'x'"); a bad value kInvalidArgument.
Expected<EngineConfig> engine_config_from_args(const std::vector<EngineArg>& args);

}  // namespace pagellm::python
