// The route table of `pagellm serve`: authentication, dispatch by method and path, and the small
// routes (models, health, metrics, tokenize, detokenize, version). Generation is openai_serving.h.
//
//   POST /v1/completions  /v1/chat/completions  /tokenize  /detokenize     (API key when set)
//   GET  /v1/models                                                       (API key when set)
//   GET  /health  /metrics  /version                                      (always open)
//   GET  /  /ui/NAME           the chat page (chat_page.h), unless serve --no-ui (always open)
//
// Routing and the API key are checked on the head, before the body is read (HttpService::screen_head):
// 404 unknown path, 405 other method (with Allow; HEAD included, answered without a body), 401.
// /health is a quick path: answered even when every connection slot is taken.
#pragma once

#include <memory>

#include "server/http_server.h"
#include "server/serving_context.h"

namespace pagellm::server {

HttpService make_api_handler(std::shared_ptr<const ServingContext> context);

}  // namespace pagellm::server
