// Log-probabilities in OpenAI's two shapes:
//   completions  {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}], "text_offset": [...]}
//   chat         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
// and vLLM's prompt_logprobs: [null, {"<token id>": {"logprob", "rank", "decoded_token"}, ...}, ...],
// one entry per prompt token (the first has no context), holding the prompt token then the top-k.
// A token is shown as its own decoded text (a piece of a multi-byte character shows as U+FFFD, as in vLLM).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "sched/step.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

class LogprobFormatter {
 public:
  explicit LogprobFormatter(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  std::string token_text(TokenId id) const;
  static nlohmann::ordered_json empty_completion_logprobs();
  // Appends one entry per token; text_offset advances by each token's text length.
  void append_completion(nlohmann::ordered_json& logprobs, const std::vector<TokenId>& ids,
                         const std::vector<SampledLogprobs>& steps, int& text_offset) const;
  // Appends one {"token", "logprob", "bytes", "top_logprobs"} per token to `content`.
  void append_chat(nlohmann::ordered_json& content, const std::vector<TokenId>& ids,
                   const std::vector<SampledLogprobs>& steps) const;
  // entries[i] is prompt token i + 1 (RequestOutput::prompt_logprobs).
  nlohmann::ordered_json prompt_logprobs(const std::vector<PromptTokenLogprobs>& entries) const;

 private:
  nlohmann::ordered_json chat_entry(TokenId id, float logprob) const;
  const Tokenizer* tokenizer_;
};

}  // namespace pagellm::server
