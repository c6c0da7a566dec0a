#include "python/offline_engine.h"

#include <filesystem>

#include <fmt/format.h>

#include "server/openai_request.h"

namespace pagellm::python {

namespace {
// The model name the chat body is parsed under; offline there is one model, so any name works.
constexpr const char* kOfflineModelName = "pagellm-offline";
}  // namespace

Expected<std::unique_ptr<OfflineEngine>> OfflineEngine::load(const EngineConfig& config) {
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<LLM> llm, LLM::load(config));
  std::unique_ptr<OfflineEngine> offline(new OfflineEngine(std::move(llm)));
  offline->load_chat_template();
  return offline;
}

// As `pagellm serve` without --chat-template: tokenizer_config.json's template of the tokenizer folder.
void OfflineEngine::load_chat_template() {
  const EngineConfig& config = engine().config();
  const std::string tokenizer_dir = config.tokenizer_dir.empty() ? config.model_dir : config.tokenizer_dir;
  const std::filesystem::path path = std::filesystem::path(tokenizer_dir) / "tokenizer_config.json";
  if (!tokenizer()) {
    chat_template_error_ = "[chat] this model has no tokenizer.json, so no chat template";
    return;
  }
  if (!std::filesystem::exists(path)) {
    chat_template_error_ = fmt::format("[chat] no chat template: {} does not exist", path.string());
    return;
  }
  Expected<ChatTemplate> loaded = ChatTemplate::from_tokenizer_config(path.string());
  if (loaded.has_value()) chat_template_ = std::move(loaded).value();
  else chat_template_error_ = fmt::format("[chat] this model has no usable chat template ({})", loaded.status().message());
}

Expected<ChatPrompt> OfflineEngine::render_chat(const std::string& body_json) const {
  if (!chat_template_) return invalid_argument("{}", chat_template_error_);
  nlohmann::ordered_json body;
  if (auto error = server::parse_json_body(body_json, body)) return invalid_argument("{}", error->message);
  body["model"] = kOfflineModelName;
  server::ParseOptions options;
  options.served_model_name = kOfflineModelName;
  options.vocab_size = engine().model_config().vocab_size;
  server::ChatRequest parsed;
  if (auto error = server::parse_chat_request(body, options, parsed)) return invalid_argument("{}", error->message);
  ChatPrompt prompt;
  PAGELLM_ASSIGN_OR_RETURN(prompt.text, chat_template_->render(parsed.template_inputs));
  // The template wrote the special tokens itself: no post-processor BOS/EOS on top (as the server).
  PAGELLM_ASSIGN_OR_RETURN(prompt.token_ids, tokenizer()->encode(prompt.text, parsed.common.add_special_tokens.value_or(false)));
  return prompt;
}

}  // namespace pagellm::python
