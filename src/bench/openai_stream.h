// The OpenAI wire format as the bench uses it: the body of one streamed request, and what one
// streamed chunk says (does it carry tokens, does it report usage, is it an error, is it [DONE]).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "bench/dataset.h"
#include "core/status.h"

namespace pagellm::bench {

enum class Endpoint { kCompletions, kChatCompletions };

// "/v1/completions" or "/v1/chat/completions" (also "completions", "chat" as shorthands).
Expected<Endpoint> parse_endpoint(const std::string& text);
const char* endpoint_path(Endpoint endpoint);

struct RequestOptions {
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
  bool ignore_eos = false;
  nlohmann::json extra_body = nlohmann::json::object();  // merged into every request (--extra-body)
};

// {"model", "prompt"|"messages" (request.history, then the user's prompt_text), "max_tokens", "temperature":0, "stream":true,
//  "stream_options":{"include_usage":true}[, "ignore_eos":true]}
std::string make_request_body(const BenchRequest& request, const RequestOptions& options);

struct StreamChunk {
  bool is_done = false;      // "data: [DONE]"
  bool has_choices = false;  // non-empty "choices": a token-bearing chunk (vLLM's rule)
  std::string text;          // the first choice's text or delta content (answers of multi-turn)
  std::optional<int64_t> completion_tokens;  // from "usage"
  std::optional<std::string> error;          // an {"error": ...} chunk or unparsable data
};

StreamChunk parse_stream_chunk(std::string_view data);

}  // namespace pagellm::bench
