// POST /v1/responses: the Responses API that newer OpenAI clients and agent SDKs call by default,
// served through the chat pipeline. The request is translated into a chat completion request
// (input items -> messages, instructions -> a system message, flat function tools -> chat tools,
// text.format -> response_format, max_output_tokens -> max_tokens); the chat answer, whole or
// streamed, is translated back into a Response object or the Responses stream events
// (response.created ... response.output_text.delta ... response.completed).
// Stateless: previous_response_id and store are refused (there is nothing stored to continue).
#pragma once

#include "server/http_server.h"
#include "server/serving_context.h"

namespace pagellm::server {

void handle_responses(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer);

}  // namespace pagellm::server
