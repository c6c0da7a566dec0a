// GenerationDefaults: the sampling defaults of a model's generation_config.json, applied as vLLM's
// --generation-config auto applies them: to the fields a request leaves out (a request's own values
// always win). temperature, top_p, top_k, min_p, repetition_penalty, and max_new_tokens as the
// default max_tokens.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/openai_request.h"

namespace pagellm::server {

struct GenerationDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k, max_tokens;
  bool empty() const {
    return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens;
  }
  std::string describe() const;  // "temperature=0.6, top_p=0.95, top_k=20" for the start-up log
};

// --generation-config: "auto" reads <model_dir>/generation_config.json (none there: no defaults),
// "vllm" ignores it, anything else is a folder holding one (missing: an error).
Expected<GenerationDefaults> load_generation_defaults(const std::string& setting, const std::string& model_dir);

// Fills the sampling fields `body` does not name from `defaults`.
void apply_generation_defaults(const nlohmann::ordered_json& body, const GenerationDefaults& defaults,
                               CommonFields& common);

}  // namespace pagellm::server
