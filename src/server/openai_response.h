// OpenAI response bodies: completions and chat completions, whole or as stream chunks, usage,
// and the server-sent-event framing of a stream:
//
//   data: {chunk}\n\n  ...  [data: {"choices": [], "usage": {...}}\n\n]  data: [DONE]\n\n
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sched/request.h"
#include "server/tool_parser.h"

namespace pagellm::server {

enum class ApiKind { kCompletion, kChat };

struct ResponseMeta {
  ApiKind kind = ApiKind::kCompletion;
  std::string id;       // "cmpl-…" / "chatcmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;    // served name
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

ResponseMeta new_response_meta(ApiKind kind, std::string model);

// One choice of a whole response. logprobs: null, or the API's logprobs object.
nlohmann::ordered_json response_choice(ApiKind kind, int index, const std::string& text,
                                       nlohmann::ordered_json logprobs, std::optional<FinishReason> finish_reason);
nlohmann::ordered_json whole_response(const ResponseMeta& meta, nlohmann::ordered_json choices, const Usage& usage);

// One stream chunk of one choice. Chat: `with_role` puts role "assistant" into the delta (first chunk).
nlohmann::ordered_json chunk(const ResponseMeta& meta, int index, const std::string& text, bool with_role,
                             nlohmann::ordered_json logprobs, std::optional<FinishReason> finish_reason,
                             bool include_usage);
nlohmann::ordered_json usage_chunk(const ResponseMeta& meta, const Usage& usage);

// Chat with output parsers (tool calls, reasoning). The message: content is null when it is empty
// and the model called tools or only reasoned; reasoning_content is there when a reasoning parser
// runs; tool_calls [{id, type: "function", function: {name, arguments}}] when there are calls.
nlohmann::ordered_json chat_message(const ParsedMessage& message, bool with_reasoning);
// "tool_calls" when the model called tools and stopped by itself; otherwise the engine's reason.
nlohmann::ordered_json chat_finish_reason(std::optional<FinishReason> reason, bool called_tools);
nlohmann::ordered_json chat_choice(int index, nlohmann::ordered_json message, nlohmann::ordered_json logprobs,
                                   nlohmann::ordered_json finish_reason);
// A stream chunk of one chat choice: its delta carries content, reasoning_content and tool-call
// pieces (a call's first piece with index, id, type and name; later ones with argument text).
nlohmann::ordered_json chat_delta_chunk(const ResponseMeta& meta, int index, const MessageDelta& delta, bool with_role,
                                        nlohmann::ordered_json logprobs, nlohmann::ordered_json finish_reason,
                                        bool include_usage);

nlohmann::ordered_json usage_json(const Usage& usage);
std::string to_json_text(const nlohmann::ordered_json& value);  // invalid UTF-8 replaced, never throws
std::string sse_event(const nlohmann::ordered_json& value);     // "data: {...}\n\n"
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace pagellm::server
