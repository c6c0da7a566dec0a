#include "engine/llm.h"

namespace pagellm {

void CompletedRequest::append(RequestOutput out) {
  token_ids.insert(token_ids.end(), out.token_ids.begin(), out.token_ids.end());
  text += out.text;
  for (auto& lp : out.logprobs) logprobs.push_back(std::move(lp));
  if (!out.prompt_logprobs.empty()) prompt_logprobs = std::move(out.prompt_logprobs);
  num_cached_tokens = out.num_cached_tokens;
  if (!out.error.is_ok()) error = out.error;
  if (out.finish_reason) finish_reason = *out.finish_reason;
  if (out.stop_string_index >= 0) stop_string_index = out.stop_string_index;
}

LLM::LLM(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) { engine_->start(); }

LLM::~LLM() { engine_->stop(); }

Expected<std::unique_ptr<LLM>> LLM::load(const EngineConfig& config) {
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::load(config));
  return std::make_unique<LLM>(std::move(engine));
}

std::vector<CompletedRequest> LLM::generate(std::vector<GenerateRequest> requests) {
  std::vector<CompletedRequest> results(requests.size());
  std::vector<std::shared_ptr<OutputChannel>> channels(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) results[i].prompt_token_ids = requests[i].prompt_token_ids;
  auto submitted = engine_->submit_all(std::move(requests));
  for (size_t i = 0; i < submitted.size(); ++i) {
    if (submitted[i].has_value()) channels[i] = *submitted[i];
    else results[i].error = submitted[i].status();
  }
  for (size_t i = 0; i < channels.size(); ++i) {
    if (!channels[i]) continue;
    while (auto out = channels[i]->next()) results[i].append(std::move(*out));
  }
  return results;
}

}  // namespace pagellm
