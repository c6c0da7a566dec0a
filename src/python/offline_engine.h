// OfflineEngine: what the Python package's LLM holds. The started engine (engine/llm.h), the
// model's chat template, and the chat rendering of `pagellm serve`: a conversation goes through the
// server's own request parsing (server/openai_request.h), template and tokenization, so llm.chat()
// prompts are exactly those of /v1/chat/completions.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/llm.h"
#include "tokenizer/chat_template.h"

namespace pagellm::python {

struct ChatPrompt {
  std::string text;             // the rendered template
  std::vector<TokenId> token_ids;
};

class OfflineEngine {
 public:
  // Loads config.model_dir (already resolved) and starts the engine thread.
  static Expected<std::unique_ptr<OfflineEngine>> load(const EngineConfig& config);

  Engine& engine() { return llm_->engine(); }
  const Engine& engine() const { return llm_->engine(); }
  // null when the model folder has no tokenizer.json.
  const Tokenizer* tokenizer() const { return llm_->engine().tokenizer(); }
  // `body_json` is a /v1/chat/completions body without "model" (messages, tools,
  // chat_template_kwargs, add_generation_prompt, add_special_tokens); errors are the server's 400s.
  Expected<ChatPrompt> render_chat(const std::string& body_json) const;

 private:
  explicit OfflineEngine(std::unique_ptr<LLM> llm) : llm_(std::move(llm)) {}
  void load_chat_template();

  std::unique_ptr<LLM> llm_;
  std::optional<ChatTemplate> chat_template_;
  std::string chat_template_error_;  // why there is none
};

}  // namespace pagellm::python
