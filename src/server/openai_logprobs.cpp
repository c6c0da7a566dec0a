#include "server/openai_logprobs.h"

#include <cmath>
#include <string>

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {
// JSON has no -inf; vLLM reports impossible tokens as -9999.0 too.
double finite_logprob(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }
}  // namespace

std::string LogprobFormatter::token_text(TokenId id) const {
  if (!tokenizer_) return "token_id:" + std::to_string(id);
  return tokenizer_->decode({id}, /*skip_special_tokens=*/false);
}

Json LogprobFormatter::empty_completion_logprobs() {
  return Json{{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
}

void LogprobFormatter::append_completion(Json& logprobs, const std::vector<TokenId>& ids,
                                         const std::vector<SampledLogprobs>& steps, int& text_offset) const {
  for (size_t i = 0; i < ids.size() && i < steps.size(); ++i) {
    const std::string text = token_text(ids[i]);
    logprobs["tokens"].push_back(text);
    logprobs["token_logprobs"].push_back(finite_logprob(steps[i].sampled_logprob));
    Json top = Json::object();
    for (const TokenLogprob& alt : steps[i].top) {
      const std::string alt_text = token_text(alt.token_id);
      if (!top.contains(alt_text)) top[alt_text] = finite_logprob(alt.logprob);
    }
    if (!top.contains(text)) top[text] = finite_logprob(steps[i].sampled_logprob);  // as vLLM: the sampled one too
    logprobs["top_logprobs"].push_back(std::move(top));
    logprobs["text_offset"].push_back(text_offset);
    text_offset += static_cast<int>(text.size());
  }
}

Json LogprobFormatter::chat_entry(TokenId id, float logprob) const {
  const std::string text = token_text(id);
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return Json{{"token", text}, {"logprob", finite_logprob(logprob)}, {"bytes", std::move(bytes)}};
}

void LogprobFormatter::append_chat(Json& content, const std::vector<TokenId>& ids,
                                   const std::vector<SampledLogprobs>& steps) const {
  for (size_t i = 0; i < ids.size() && i < steps.size(); ++i) {
    Json entry = chat_entry(ids[i], steps[i].sampled_logprob);
    Json top = Json::array();
    for (const TokenLogprob& alt : steps[i].top) top.push_back(chat_entry(alt.token_id, alt.logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
}

Json LogprobFormatter::prompt_logprobs(const std::vector<PromptTokenLogprobs>& entries) const {
  Json list = Json::array({nullptr});
  for (const PromptTokenLogprobs& entry : entries) {
    Json tokens = Json::object();
    auto add = [&](TokenId id, float logprob, int64_t rank) {
      const std::string key = std::to_string(id);
      if (!tokens.contains(key))
        tokens[key] = Json{{"logprob", finite_logprob(logprob)}, {"rank", rank}, {"decoded_token", token_text(id)}};
    };
    add(entry.token_id, entry.logprob, entry.rank);
    for (size_t k = 0; k < entry.top.size(); ++k) add(entry.top[k].token_id, entry.top[k].logprob, static_cast<int64_t>(k) + 1);
    list.push_back(std::move(tokens));
  }
  return list;
}

}  // namespace pagellm::server
