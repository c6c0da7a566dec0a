// The generation routes: POST /v1/completions and POST /v1/chat/completions, whole or streamed.
//
//   body ─parse/validate─▶ prompts (ids) ─fit max_tokens─▶ one GenerateRequest per choice
//        ─▶ ChoiceStreams ─▶ whole response, or SSE: one event per engine output, [usage], [DONE]
#pragma once

#include "server/http_connection.h"
#include "server/serving_context.h"

namespace pagellm::server {

void handle_completions(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer);
void handle_chat_completions(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer);

}  // namespace pagellm::server
