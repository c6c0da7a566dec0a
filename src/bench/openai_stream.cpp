#include "bench/openai_stream.h"

#include <nlohmann/json.hpp>

namespace pagellm::bench {

Expected<Endpoint> parse_endpoint(const std::string& text) {
  if (text == "/v1/completions" || text == "completions") return Endpoint::kCompletions;
  if (text == "/v1/chat/completions" || text == "chat") return Endpoint::kChatCompletions;
  return invalid_argument("[bench] --endpoint must be /v1/completions or /v1/chat/completions, got '{}'",
                          text);
}

const char* endpoint_path(Endpoint endpoint) {
  return endpoint == Endpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

std::string make_request_body(const BenchRequest& request, const RequestOptions& options) {
  nlohmann::json body;
  body["model"] = options.model;
  if (options.endpoint == Endpoint::kChatCompletions) {
    nlohmann::json messages = nlohmann::json::array();
    for (const ChatMessage& m : request.history) messages.push_back({{"role", m.role}, {"content", m.content}});
    messages.push_back({{"role", "user"}, {"content", request.prompt_text}});
    body["messages"] = std::move(messages);
  } else if (!request.prompt_token_ids.empty()) {
    body["prompt"] = request.prompt_token_ids;
  } else {
    body["prompt"] = request.prompt_text;
  }
  body["max_tokens"] = request.output_len;
  body["temperature"] = 0;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  body.update(options.extra_body);
  return body.dump();
}

namespace {

std::string error_text(const nlohmann::json& error) {
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  return error.dump();
}

// The text one choice adds: "text" (completions) or "delta"."content" (chat); "" when absent.
std::string choice_text(const nlohmann::json& choice) {
  if (!choice.is_object()) return {};
  if (auto it = choice.find("text"); it != choice.end() && it->is_string()) return it->get<std::string>();
  auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return {};
  auto content = delta->find("content");
  return content != delta->end() && content->is_string() ? content->get<std::string>() : std::string();
}

}  // namespace

StreamChunk parse_stream_chunk(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.is_done = true;
    return chunk;
  }
  nlohmann::json parsed = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    constexpr size_t kMaxShownBytes = 120;
    chunk.error = fmt::format("[bench] malformed SSE event: '{}'",
                              std::string(data.substr(0, kMaxShownBytes)));
    return chunk;
  }
  if (auto it = parsed.find("error"); it != parsed.end() && !it->is_null()) {
    chunk.error = "[bench] server error in stream: " + error_text(*it);
    return chunk;
  }
  if (auto it = parsed.find("choices"); it != parsed.end()) {
    chunk.has_choices = it->is_array() && !it->empty();
    if (chunk.has_choices) chunk.text = choice_text((*it)[0]);
  }
  if (auto it = parsed.find("usage"); it != parsed.end() && it->is_object()) {
    auto tokens = it->find("completion_tokens");
    if (tokens != it->end() && tokens->is_number_integer()) chunk.completion_tokens = tokens->get<int64_t>();
  }
  return chunk;
}

}  // namespace pagellm::bench
