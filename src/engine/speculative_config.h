// SpeculativeConfig: --speculative-config JSON, with vLLM's key names.
//
//   {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"model": "/path/to/draft", "num_speculative_tokens": 3}        (method "draft_model" implied)
//   {"method": "mtp", "num_speculative_tokens": 2}   the target checkpoint's MTP head (Qwen3.5, Qwen3-Next)
//
// As vLLM: a missing prompt_lookup_min / _max takes the other's value, both missing are 5; a model
// without a method is a draft model. Anything else (unknown keys, unknown methods, k out of range)
// is a one-line error naming it.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace pagellm {

enum class SpeculativeMethod { kNone, kNgram, kDraftModel, kMtp };

struct SpeculativeConfig {
  static constexpr int kMaxSpeculativeTokens = 15;

  SpeculativeMethod method = SpeculativeMethod::kNone;
  int num_speculative_tokens = 0;  // k: draft tokens per decode step, [1, kMaxSpeculativeTokens]
  int prompt_lookup_min = 0;       // ngram: shortest suffix that may match, >= 1
  int prompt_lookup_max = 0;       // ngram: longest suffix tried first, >= prompt_lookup_min
  std::string draft_model_dir;     // draft_model: the draft checkpoint's folder

  bool enabled() const { return method != SpeculativeMethod::kNone; }
};

std::string_view speculative_method_name(SpeculativeMethod method);
// "" = speculation off. Errors read "[speculative-config] ...".
Expected<SpeculativeConfig> parse_speculative_config(std::string_view json_text);

}  // namespace pagellm
