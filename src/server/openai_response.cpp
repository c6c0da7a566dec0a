#include "server/openai_response.h"

#include <atomic>
#include <chrono>
#include <random>

#include <fmt/format.h>

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

const char* object_name(ApiKind kind, bool is_chunk) {
  if (kind == ApiKind::kChat) return is_chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

Json finish_json(std::optional<FinishReason> reason) {
  return reason ? Json(std::string(finish_reason_name(*reason))) : Json(nullptr);
}

// Unique within a process (counter) and across restarts (random salt), spread by splitmix64.
std::string new_id_suffix() {
  static const uint64_t salt = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  uint64_t z = salt + (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return fmt::format("{:016x}{:016x}", salt, z ^ (z >> 31));
}

}  // namespace

ResponseMeta new_response_meta(ApiKind kind, std::string model) {
  ResponseMeta meta;
  meta.kind = kind;
  meta.id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + new_id_suffix();
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  meta.model = std::move(model);
  return meta;
}

Json usage_json(const Usage& usage) {
  return Json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

Json response_choice(ApiKind kind, int index, const std::string& text, Json logprobs,
                     std::optional<FinishReason> finish_reason) {
  Json choice;
  choice["index"] = index;
  if (kind == ApiKind::kChat) choice["message"] = Json{{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_json(finish_reason);
  return choice;
}

Json whole_response(const ResponseMeta& meta, Json choices, const Usage& usage) {
  return Json{{"id", meta.id},           {"object", object_name(meta.kind, false)}, {"created", meta.created},
              {"model", meta.model},     {"choices", std::move(choices)},           {"usage", usage_json(usage)}};
}

namespace {

Json wrap_chunk(const ResponseMeta& meta, Json choice, bool include_usage) {
  Json out{{"id", meta.id}, {"object", object_name(meta.kind, true)}, {"created", meta.created}, {"model", meta.model},
           {"choices", Json::array({std::move(choice)})}};
  if (include_usage) out["usage"] = nullptr;  // as OpenAI: every chunk has "usage", null but the last
  return out;
}

Json tool_call_piece_json(const ToolCallDelta& piece) {
  Json out{{"index", piece.index}};
  Json function = Json::object();
  if (!piece.id.empty()) {
    out["id"] = piece.id;
    out["type"] = "function";
    function["name"] = piece.name;
  }
  function["arguments"] = piece.arguments;
  out["function"] = std::move(function);
  return out;
}

}  // namespace

Json chunk(const ResponseMeta& meta, int index, const std::string& text, bool with_role, Json logprobs,
           std::optional<FinishReason> finish_reason, bool include_usage) {
  Json choice;
  choice["index"] = index;
  if (meta.kind == ApiKind::kChat) {
    Json delta = Json::object();
    if (with_role) delta["role"] = "assistant";
    delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_json(finish_reason);
  return wrap_chunk(meta, std::move(choice), include_usage);
}

Json chat_message(const ParsedMessage& message, bool with_reasoning) {
  Json out{{"role", "assistant"}};
  const bool content_is_null = message.content.empty() && (!message.tool_calls.empty() || !message.reasoning.empty());
  out["content"] = content_is_null ? Json(nullptr) : Json(message.content);
  if (with_reasoning) out["reasoning_content"] = message.reasoning.empty() ? Json(nullptr) : Json(message.reasoning);
  if (!message.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& call : message.tool_calls)
      calls.push_back({{"id", call.id},
                       {"type", "function"},
                       {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
    out["tool_calls"] = std::move(calls);
  }
  return out;
}

Json chat_finish_reason(std::optional<FinishReason> reason, bool called_tools) {
  if (called_tools && reason == FinishReason::kStop) return "tool_calls";
  return finish_json(reason);
}

Json chat_choice(int index, Json message, Json logprobs, Json finish_reason) {
  return Json{{"index", index}, {"message", std::move(message)}, {"logprobs", std::move(logprobs)},
              {"finish_reason", std::move(finish_reason)}};
}

Json chat_delta_chunk(const ResponseMeta& meta, int index, const MessageDelta& delta, bool with_role, Json logprobs,
                      Json finish_reason, bool include_usage) {
  Json out = Json::object();
  if (with_role) out["role"] = "assistant";
  if (!delta.content.empty() || (delta.reasoning.empty() && delta.tool_calls.empty())) out["content"] = delta.content;
  if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
  if (!delta.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& piece : delta.tool_calls) calls.push_back(tool_call_piece_json(piece));
    out["tool_calls"] = std::move(calls);
  }
  Json choice{{"index", index}, {"delta", std::move(out)}, {"logprobs", std::move(logprobs)},
              {"finish_reason", std::move(finish_reason)}};
  return wrap_chunk(meta, std::move(choice), include_usage);
}

Json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  return Json{{"id", meta.id},       {"object", object_name(meta.kind, true)}, {"created", meta.created},
              {"model", meta.model}, {"choices", Json::array()},               {"usage", usage_json(usage)}};
}

std::string to_json_text(const Json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const Json& value) { return "data: " + to_json_text(value) + "\n\n"; }

}  // namespace pagellm::server
