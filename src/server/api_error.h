// ApiError: an OpenAI-shaped error, {"error": {"message", "type", "param", "code"}}, and the one
// place where pagellm Status codes become HTTP status codes.
#pragma once

#include <string>

#include "core/status.h"
#include "server/http_message.h"

namespace pagellm::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string param;  // the offending request field; empty = null
  std::string code;   // machine-readable reason ("model_not_found"); empty = null
};

// The mapping: kInvalidArgument/kUnimplemented 400, kUnauthenticated 401, kNotFound 404,
// kTooLarge 413, kUnavailable 429 (waiting queue full: retry later), kInternal (a bug) 500.
int http_status_for(StatusCode code);
ApiError api_error_from_status(const Status& status, std::string param = "");

ApiError bad_request(std::string message, std::string param = "", std::string code = "invalid_value");

// OpenAI's error "type" for an HTTP status: invalid_request_error for 4xx, rate_limit_error, server_error.
std::string error_type_for(int http_status);
std::string error_json(const ApiError& error);
HttpResponse error_response(const ApiError& error);
// For the HTTP layer's own errors (malformed head, 413, 408, ...).
HttpResponse error_response(int http_status, const std::string& message);

}  // namespace pagellm::server
