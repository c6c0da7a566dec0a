// The route table of `pagellm serve`: authentication, dispatch by method and path, and the small
// routes (models, health, metrics, tokenize, detokenize, version). Generation is openai_serving.h.
//
//   POST /v1/completions  /v1/chat/completions  /tokenize  /detokenize     (API key when set)
//   GET  /v1/models                                                       (API key when set)
//   GET  /health  /metrics  /version                                      (always open)
#pragma once

#include <memory>

#include "server/http_server.h"
#include "server/serving_context.h"

namespace pagellm::server {

HttpHandler make_api_handler(std::shared_ptr<const ServingContext> context);

}  // namespace pagellm::server
