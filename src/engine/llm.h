// LLM: the offline API over the engine. Give it prompts and sampling params, get complete outputs
// in input order. All requests are submitted at once, so they batch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace pagellm {

struct CompletedRequest {
  std::vector<TokenId> prompt_token_ids;
  std::vector<TokenId> token_ids;
  std::string text;  // empty without a tokenizer
  std::vector<SampledLogprobs> logprobs;
  std::vector<PromptTokenLogprobs> prompt_logprobs;  // prompt tokens 1 .. when asked (prompt_logprobs)
  FinishReason finish_reason = FinishReason::kAbort;
  int num_cached_tokens = 0;
  Status error;
  int stop_string_index = -1;  // the stop string that ended it, else -1

  // Adds one of the request's streamed outputs (tokens, text, logprobs, how it ended).
  void append(RequestOutput out);
};

class LLM {
 public:
  explicit LLM(std::unique_ptr<Engine> engine);
  ~LLM();
  static Expected<std::unique_ptr<LLM>> load(const EngineConfig& config);

  // Runs all requests to completion. A request the engine rejects comes back with `error` set.
  std::vector<CompletedRequest> generate(std::vector<GenerateRequest> requests);
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace pagellm
