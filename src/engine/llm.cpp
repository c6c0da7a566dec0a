#include "engine/llm.h"

namespace pagellm {

LLM::LLM(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) { engine_->start(); }

LLM::~LLM() { engine_->stop(); }

Expected<std::unique_ptr<LLM>> LLM::load(const EngineConfig& config) {
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::load(config));
  return std::make_unique<LLM>(std::move(engine));
}

std::vector<CompletedRequest> LLM::generate(std::vector<GenerateRequest> requests) {
  std::vector<CompletedRequest> results(requests.size());
  std::vector<std::shared_ptr<OutputChannel>> channels(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].prompt_token_ids = requests[i].prompt_token_ids;
    auto channel = engine_->submit(std::move(requests[i]));
    if (channel.has_value()) channels[i] = *channel;
    else results[i].error = channel.status();
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (!channels[i]) continue;
    CompletedRequest& result = results[i];
    while (auto out = channels[i]->next()) {
      result.token_ids.insert(result.token_ids.end(), out->token_ids.begin(), out->token_ids.end());
      result.text += out->text;
      for (auto& lp : out->logprobs) result.logprobs.push_back(std::move(lp));
      result.num_cached_tokens = out->num_cached_tokens;
      if (!out->error.is_ok()) result.error = out->error;
      if (out->finish_reason) result.finish_reason = *out->finish_reason;
    }
  }
  return results;
}

}  // namespace pagellm
