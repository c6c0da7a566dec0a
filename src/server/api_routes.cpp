#include "server/api_routes.h"

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string_view>
#include <variant>

#include <fmt/format.h>

#include "core/version.h"
#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/json_fields.h"
#include "server/metrics_text.h"
#include "server/openai_response.h"
#include "server/openai_responses.h"
#include "server/prompt_byte_limit.h"
#include "server/openai_serving.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

using RouteFn = std::function<void(const ServingContext&, const HttpRequest&, ResponseWriter&)>;

struct Route {
  std::string_view method;
  std::string_view path;
  bool needs_api_key;
  RouteFn handle;
};

HttpResponse json_response(const Json& body, int status = 200) {
  HttpResponse response;
  response.status = status;
  response.body = to_json_text(body);
  return response;
}

// Compares without an early exit, so response time does not reveal how much of a key was right.
bool keys_equal(std::string_view given, std::string_view expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ expected[i]);
  return diff == 0;
}

// "Authorization: Bearer KEY"; the scheme name is case-insensitive (RFC 9110 §11.1).
bool is_authorized(const ServingContext& context, const HttpRequest& request) {
  if (context.api_key.empty()) return true;
  const std::string* header = request.header("authorization");
  constexpr std::string_view kBearer = "bearer ";
  if (!header || header->size() < kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i)
    if (std::tolower(static_cast<unsigned char>((*header)[i])) != kBearer[i]) return false;
  std::string_view key = std::string_view(*header).substr(kBearer.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  return keys_equal(key, context.api_key);
}

void handle_models(const ServingContext& context, const HttpRequest&, ResponseWriter& writer) {
  static const int64_t started =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  Json models = Json::array();
  std::vector<std::string> names = {context.served_model_name};
  names.insert(names.end(), context.parse_options.model_aliases.begin(), context.parse_options.model_aliases.end());
  for (const std::string& name : names)
    models.push_back(Json{{"id", name},
                          {"object", "model"},
                          {"created", started},
                          {"owned_by", "pagellm"},
                          {"root", context.model_dir},
                          {"parent", nullptr},
                          {"max_model_len", context.max_model_len}});
  writer.respond(json_response(Json{{"object", "list"}, {"data", std::move(models)}}));
}

void handle_health(const ServingContext& context, const HttpRequest&, ResponseWriter& writer) {
  HttpResponse response;
  response.content_type = "text/plain";
  if (context.engine->is_running()) {
    response.body = "ok\n";
  } else {
    response.status = 503;
    response.body = "engine not running\n";
  }
  writer.respond(response);
}

void handle_metrics(const ServingContext& context, const HttpRequest&, ResponseWriter& writer) {
  HttpResponse response;
  response.content_type = "text/plain; version=0.0.4; charset=utf-8";
  response.body = prometheus_text(context.engine->metrics(), context.served_model_name);
  writer.respond(response);
}

void handle_version(const ServingContext& context, const HttpRequest&, ResponseWriter& writer) {
  writer.respond(json_response(
      Json{{"version", pagellm_version()}, {"backend", context.engine->config().device}, {"git_commit", pagellm_git_commit()}}));
}

// {"prompt": "text" | [ids], "add_special_tokens": true} or {"messages": [...], ...} (chat template).
void handle_tokenize(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer) {
  Json body;
  if (auto error = parse_json_body(request.body, body)) return (void)writer.respond(error_response(*error));
  if (body.contains("model") && !body["model"].is_null())
    if (auto error = check_model(body, context.parse_options)) return (void)writer.respond(error_response(*error));
  if (!context.tokenizer)
    return (void)writer.respond(error_response(bad_request("[tokenize] this model has no tokenizer.json")));
  JsonFields fields(body);
  std::string text;
  bool add_special_tokens = true;
  if (body.contains("messages")) {
    ChatRequest chat;
    Json chat_body = body;
    chat_body["model"] = context.served_model_name;
    if (auto error = parse_chat_request(chat_body, context.parse_options, chat))
      return (void)writer.respond(error_response(*error));
    if (!context.chat_template)
      return (void)writer.respond(error_response(bad_request(context.chat_template_error, "messages", "not_supported")));
    Expected<std::string> rendered = context.chat_template->render(chat.template_inputs);
    if (!rendered.has_value())
      return (void)writer.respond(error_response(api_error_from_status(rendered.status(), "messages")));
    text = std::move(rendered).value();
    add_special_tokens = false;
  } else if (auto prompt = fields.string("prompt")) {
    text = *prompt;
  } else if (fields.ok()) {
    return (void)writer.respond(error_response(bad_request("[tokenize] give 'prompt' (a string) or 'messages'", "prompt",
                                                           "missing_required_parameter")));
  }
  if (auto v = fields.boolean("add_special_tokens")) add_special_tokens = *v;
  if (!fields.ok()) return (void)writer.respond(error_response(*fields.error()));
  Expected<std::vector<int32_t>> ids = context.tokenizer->encode(text, add_special_tokens);
  if (!ids.has_value()) return (void)writer.respond(error_response(api_error_from_status(ids.status(), "prompt")));
  writer.respond(json_response(Json{{"count", ids->size()}, {"max_model_len", context.max_model_len}, {"tokens", *ids}}));
}

void handle_detokenize(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer) {
  Json body;
  if (auto error = parse_json_body(request.body, body)) return (void)writer.respond(error_response(*error));
  if (!context.tokenizer)
    return (void)writer.respond(error_response(bad_request("[detokenize] this model has no tokenizer.json")));
  JsonFields fields(body);
  auto tokens = fields.integer_list("tokens", 0, context.parse_options.vocab_size - 1, 1u << 20);
  if (!fields.ok()) return (void)writer.respond(error_response(*fields.error()));
  if (!tokens)
    return (void)writer.respond(error_response(bad_request("[detokenize] 'tokens' is required", "tokens",
                                                           "missing_required_parameter")));
  std::vector<int32_t> ids(tokens->begin(), tokens->end());
  writer.respond(json_response(Json{{"prompt", context.tokenizer->decode(ids, /*skip_special_tokens=*/false)}}));
}

// resolve() sends here only paths that are files of the page.
void handle_chat_page(const ServingContext&, const HttpRequest& request, ResponseWriter& writer) {
  writer.respond(chat_page_response(*find_chat_page_file(request.path)));
}

const std::vector<Route>& routes() {
  static const std::vector<Route> table = {
      {"POST", "/v1/completions", true, handle_completions},
      {"POST", "/v1/chat/completions", true, handle_chat_completions},
      {"POST", "/v1/responses", true, handle_responses},
      {"GET", "/v1/models", true, handle_models},
      {"POST", "/tokenize", true, handle_tokenize},
      {"POST", "/detokenize", true, handle_detokenize},
      {"GET", "/health", false, handle_health},
      {"GET", "/metrics", false, handle_metrics},
      {"GET", "/version", false, handle_version},
  };
  return table;
}

// The routes of `path`: those of the table, or the chat page's (open: the page itself holds no
// data, and asks for the key its /v1 calls need) while it is on.
std::vector<const Route*> routes_of(const ServingContext& context, std::string_view path) {
  static const Route chat_page_route = {"GET", "", false, handle_chat_page};
  std::vector<const Route*> found;
  for (const Route& route : routes())
    if (route.path == path) found.push_back(&route);
  if (context.serve_chat_page && find_chat_page_file(path) != nullptr) found.push_back(&chat_page_route);
  return found;
}

// The route of a request, or the response that refuses it (404, 405 with Allow, 401): decided from
// the head alone, so refused bodies are never read.
std::variant<const Route*, HttpResponse> resolve(const ServingContext& context, const HttpRequest& request) {
  std::string allowed;
  for (const Route* found : routes_of(context, request.path)) {
    const Route& route = *found;
    if (route.method != request.method) {
      allowed += allowed.empty() ? std::string(route.method) : ", " + std::string(route.method);
      continue;
    }
    if (route.needs_api_key && !is_authorized(context, request))
      return error_response(ApiError{401, "[auth] missing or wrong API key: send 'Authorization: Bearer KEY'", "",
                                     "invalid_api_key"});
    return &route;
  }
  if (!allowed.empty()) {
    HttpResponse response = error_response(ApiError{
        405, fmt::format("[http] {} is not allowed on {} (allowed: {})", request.method, request.path, allowed), "",
        "method_not_allowed"});
    response.extra_headers.emplace_back("Allow", allowed);
    return response;
  }
  return error_response(ApiError{404, fmt::format("[http] no route {} {}", request.method, request.path), "",
                                 "not_found"});
}

}  // namespace

HttpService make_api_handler(std::shared_ptr<const ServingContext> context) {
  auto filled = std::make_shared<ServingContext>(*context);
  if (filled->tokenizer && filled->max_prompt_bytes == 0)
    filled->max_prompt_bytes = prompt_byte_limit(*filled->tokenizer, filled->tokenizer_dir, filled->max_model_len);
  HttpService service;
  service.screen_head = [filled](const HttpRequest& head) -> std::optional<HttpResponse> {
    auto resolved = resolve(*filled, head);
    if (auto* refused = std::get_if<HttpResponse>(&resolved)) return std::move(*refused);
    return std::nullopt;
  };
  service.handle = [filled](const HttpRequest& request, ResponseWriter& writer) {
    auto resolved = resolve(*filled, request);
    if (auto* refused = std::get_if<HttpResponse>(&resolved)) return (void)writer.respond(*refused);
    std::get<const Route*>(resolved)->handle(*filled, request, writer);
  };
  service.quick_paths = {"/health"};
  return service;
}

}  // namespace pagellm::server
