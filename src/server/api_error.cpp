#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace pagellm::server {

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnimplemented: return 400;  // "not supported" is a property of the request
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kTooLarge: return 413;
    case StatusCode::kUnavailable: return 429;
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

namespace {
std::string default_code(int http_status) {
  switch (http_status) {
    case 400: return "invalid_value";
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 408: return "request_timeout";
    case 411: return "length_required";
    case 413: return "request_too_large";
    case 429: return "rate_limit_exceeded";
    case 431: return "request_header_too_large";
    case 503: return "service_unavailable";
    default: return http_status >= 500 ? "internal_error" : "";
  }
}
}  // namespace

ApiError api_error_from_status(const Status& status, std::string param) {
  const int http = http_status_for(status.code());
  return ApiError{http, status.message(), std::move(param),
                  status.code() == StatusCode::kUnimplemented ? "not_supported" : default_code(http)};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), std::move(param), std::move(code)};
}

// As OpenAI: unknown model and bad API key are invalid_request_error too (the code tells them apart).
std::string error_type_for(int http_status) {
  if (http_status == 429) return "rate_limit_error";
  if (http_status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_json(const ApiError& error) {
  nlohmann::ordered_json body;
  auto& e = body["error"];
  e["message"] = error.message;
  e["type"] = error_type_for(error.http_status);
  e["param"] = error.param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.param);
  e["code"] = error.code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(error.code);
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse error_response(const ApiError& error) {
  HttpResponse response;
  response.status = error.http_status;
  response.body = error_json(error);
  if (error.http_status == 401) response.extra_headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

HttpResponse error_response(int http_status, const std::string& message) {
  return error_response(ApiError{http_status, message, "", default_code(http_status)});
}

}  // namespace pagellm::server
