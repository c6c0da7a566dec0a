#include "server/openai_responses.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/openai_serving.h"
#include "server/tool_parser.h"

namespace pagellm::server {

namespace {

using Json = nlohmann::ordered_json;

std::string random_id(const char* prefix) { return prefix + random_alphanumeric(24); }

// Content given as a string or as a list of {"type": "input_text" | "output_text" | "text", "text"}.
std::optional<ApiError> content_text(const Json& content, const std::string& param, std::string& out) {
  if (content.is_string()) {
    out = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array())
    return bad_request(fmt::format("[openai] '{}' must be a string or a list of text parts", param), param, "invalid_type");
  for (const Json& part : content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type != "input_text" && type != "output_text" && type != "text") || !part.contains("text") ||
        !part["text"].is_string())
      return bad_request(fmt::format("[openai] '{}' parts of type '{}' are not supported (text parts are)", param, type),
                         param, "not_supported");
    out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

// input (a string or a list of items) -> chat messages; function calls and their outputs become
// assistant tool_calls and tool messages.
std::optional<ApiError> input_messages(const Json& body, Json& messages) {
  if (body.contains("instructions") && body["instructions"].is_string())
    messages.push_back({{"role", "system"}, {"content", body["instructions"]}});
  const auto input = body.find("input");
  if (input == body.end() || input->is_null())
    return bad_request("[openai] 'input' is required", "input", "missing_required_parameter");
  if (input->is_string()) {
    messages.push_back({{"role", "user"}, {"content", *input}});
    return std::nullopt;
  }
  if (!input->is_array()) return bad_request("[openai] 'input' must be a string or a list of items", "input", "invalid_type");
  for (size_t i = 0; i < input->size(); ++i) {
    const Json& item = (*input)[i];
    const std::string param = fmt::format("input[{}]", i);
    if (!item.is_object()) return bad_request(fmt::format("[openai] '{}' must be an object", param), param, "invalid_type");
    const std::string type = item.value("type", "message");
    if (type == "message") {
      std::string role = item.value("role", "");
      if (role == "developer") role = "system";
      if (role != "user" && role != "system" && role != "assistant")
        return bad_request(fmt::format("[openai] '{}.role' must be user, system, developer or assistant", param),
                           param + ".role", "invalid_value");
      std::string text;
      if (auto error = content_text(item.value("content", Json()), param + ".content", text)) return error;
      messages.push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      const Json call = {{"id", item.value("call_id", "")},
                         {"type", "function"},
                         {"function", {{"name", item.value("name", "")}, {"arguments", item.value("arguments", "{}")}}}};
      // Consecutive calls belong to one assistant turn.
      if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls"))
        messages.back()["tool_calls"].push_back(call);
      else
        messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", Json::array({call})}});
    } else if (type == "function_call_output") {
      const Json& output = item.value("output", Json(""));
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", item.value("call_id", "")},
                          {"content", output.is_string() ? output.get<std::string>() : output.dump()}});
    } else {
      return bad_request(fmt::format("[openai] input items of type '{}' are not supported", type), param + ".type",
                         "not_supported");
    }
  }
  return std::nullopt;
}

// The Responses request as a chat completion request.
std::optional<ApiError> chat_body_of(const Json& body, Json& chat) {
  for (const char* refused : {"previous_response_id", "conversation", "background", "prompt"})
    if (body.contains(refused) && !body[refused].is_null())
      return ApiError{400, fmt::format("[openai] '{}' is not supported: this server stores no responses", refused),
                      refused, "not_supported"};
  if (body.value("store", false))
    return ApiError{400, "[openai] 'store' is not supported: this server stores no responses", "store", "not_supported"};
  Json messages = Json::array();
  if (auto error = input_messages(body, messages)) return error;
  chat = {{"model", body.value("model", Json())}, {"messages", std::move(messages)}};
  for (const char* same : {"temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p",
                           "repetition_penalty", "stop"})
    if (body.contains(same)) chat[same] = body[same];
  if (body.contains("max_output_tokens")) chat["max_tokens"] = body["max_output_tokens"];
  if (body.contains("tools") && body["tools"].is_array()) {
    Json tools = Json::array();
    for (const Json& tool : body["tools"]) {
      if (!tool.is_object() || tool.value("type", "") != "function")
        return bad_request("[openai] only function tools are supported", "tools", "not_supported");
      Json function = {{"name", tool.value("name", "")}};
      for (const char* key : {"description", "parameters", "strict"})
        if (tool.contains(key)) function[key] = tool[key];
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(tools);
  }
  if (body.contains("tool_choice")) {
    const Json& choice = body["tool_choice"];
    chat["tool_choice"] = choice.is_object() && choice.value("type", "") == "function"
                              ? Json{{"type", "function"}, {"function", {{"name", choice.value("name", "")}}}}
                              : choice;
  }
  if (body.contains("text") && body["text"].is_object() && body["text"].contains("format")) {
    const Json& format = body["text"]["format"];
    if (format.value("type", "") == "json_schema")
      chat["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", format.value("name", "output")},
                                                  {"schema", format.value("schema", Json::object())}}}};
    else
      chat["response_format"] = format;
  }
  return std::nullopt;
}

Json message_item(const std::string& id, const std::string& text) {
  return {{"type", "message"}, {"id", id}, {"status", "completed"}, {"role", "assistant"},
          {"content", Json::array({{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}}})}};
}

Json function_call_item(const std::string& id, const Json& call) {
  return {{"type", "function_call"}, {"id", id}, {"call_id", call["id"]}, {"name", call["function"]["name"]},
          {"arguments", call["function"]["arguments"]}, {"status", "completed"}};
}

Json reasoning_item(const std::string& text) {
  return {{"type", "reasoning"}, {"id", random_id("rs_")}, {"summary", Json::array()},
          {"content", Json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

Json response_object(const std::string& id, int64_t created, const Json& model, const std::string& status, Json output,
                     const Json& usage) {
  Json response = {{"id", id}, {"object", "response"}, {"created_at", created}, {"status", status},
                   {"model", model}, {"output", std::move(output)}, {"error", nullptr},
                   {"incomplete_details", status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr)}};
  if (!usage.is_null())
    response["usage"] = {{"input_tokens", usage.value("prompt_tokens", 0)},
                         {"output_tokens", usage.value("completion_tokens", 0)},
                         {"total_tokens", usage.value("total_tokens", 0)}};
  return response;
}

// A whole chat completion as a Response.
Json response_of_chat(const Json& chat) {
  const Json& choice = chat["choices"][0];
  const Json& message = choice["message"];
  Json output = Json::array();
  if (message.contains("reasoning_content") && message["reasoning_content"].is_string())
    output.push_back(reasoning_item(message["reasoning_content"]));
  if (message["content"].is_string() && !message["content"].get<std::string>().empty())
    output.push_back(message_item(random_id("msg_"), message["content"]));
  if (message.contains("tool_calls"))
    for (const Json& call : message["tool_calls"]) output.push_back(function_call_item(random_id("fc_"), call));
  const std::string status = choice["finish_reason"] == "length" ? "incomplete" : "completed";
  return response_object(random_id("resp_"), chat.value("created", int64_t{0}), chat["model"], status, std::move(output),
                         chat.value("usage", Json()));
}

// Turns the chat handler's stream into Responses events as its chunks arrive.
class ResponsesStreamWriter final : public ResponseWriter {
 public:
  explicit ResponsesStreamWriter(ResponseWriter& inner) : inner_(inner) {}

  bool respond(const HttpResponse& response) override {
    if (response.status != 200) return inner_.respond(response);  // errors pass as they are
    const Json chat = Json::parse(response.body, nullptr, false);
    HttpResponse translated = response;
    translated.body = response_of_chat(chat).dump();
    return inner_.respond(translated);
  }
  bool start_stream(int status, std::string_view content_type, const HttpHeaders& extra_headers) override {
    return inner_.start_stream(status, content_type, extra_headers);
  }
  bool write_chunk(std::string_view data) override {
    // The chat stream's server-sent events: "data: {...}\n\n" (several may share a write).
    bool ok = true;
    for (size_t end = data.find("\n\n"); ok && end != std::string_view::npos; end = data.find("\n\n")) {
      ok = on_event(data.substr(0, end));
      data.remove_prefix(end + 2);
    }
    return ok;
  }
  bool end_stream() override { return inner_.end_stream(); }
  bool client_gone() override { return inner_.client_gone(); }

 private:
  bool emit(const std::string& type, Json event) {
    event["type"] = type;
    event["sequence_number"] = sequence_++;
    return inner_.write_chunk(fmt::format("event: {}\ndata: {}\n\n", type, event.dump()));
  }
  Json snapshot(const std::string& status) const {
    return response_object(id_, created_, model_, status, output_, usage_);
  }
  bool on_event(std::string_view event) {
    const std::string_view prefix = "data: ";
    if (event.substr(0, prefix.size()) != prefix) return true;
    const std::string_view payload = event.substr(prefix.size());
    if (payload == "[DONE]") return finish();
    const Json chunk = Json::parse(payload, nullptr, false);
    return chunk.is_object() ? on_chunk(chunk) : true;
  }
  bool on_chunk(const Json& chunk) {
    bool ok = true;
    if (!started_) {
      started_ = true;
      model_ = chunk.value("model", Json());
      created_ = chunk.value("created", int64_t{0});
      ok = emit("response.created", {{"response", snapshot("in_progress")}}) &&
           emit("response.in_progress", {{"response", snapshot("in_progress")}});
    }
    if (chunk.contains("usage") && !chunk["usage"].is_null()) usage_ = chunk["usage"];
    if (!chunk.contains("choices") || chunk["choices"].empty()) return ok;
    const Json& choice = chunk["choices"][0];
    const Json& delta = choice.value("delta", Json::object());
    if (delta.contains("content") && delta["content"].is_string() && !delta["content"].get<std::string>().empty())
      ok = ok && text_delta(delta["content"]);
    if (delta.contains("tool_calls"))
      for (const Json& call : delta["tool_calls"]) ok = ok && call_delta(call);
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      finish_reason_ = choice["finish_reason"];
    return ok;
  }
  bool text_delta(const std::string& text) {
    bool ok = true;
    if (text_index_ < 0) {
      close_call();
      text_index_ = static_cast<int>(output_.size());
      text_id_ = random_id("msg_");
      Json item = message_item(text_id_, "");
      item["status"] = "in_progress";
      item["content"] = Json::array();
      output_.push_back(item);
      ok = emit("response.output_item.added", {{"output_index", text_index_}, {"item", item}}) &&
           emit("response.content_part.added",
                {{"item_id", text_id_}, {"output_index", text_index_}, {"content_index", 0},
                 {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
    }
    text_ += text;
    return ok && emit("response.output_text.delta",
                      {{"item_id", text_id_}, {"output_index", text_index_}, {"content_index", 0}, {"delta", text}});
  }
  bool close_text() {
    if (text_index_ < 0) return true;
    output_[static_cast<size_t>(text_index_)] = message_item(text_id_, text_);
    const bool ok =
        emit("response.output_text.done",
             {{"item_id", text_id_}, {"output_index", text_index_}, {"content_index", 0}, {"text", text_}}) &&
        emit("response.content_part.done",
             {{"item_id", text_id_}, {"output_index", text_index_}, {"content_index", 0},
              {"part", output_[static_cast<size_t>(text_index_)]["content"][0]}}) &&
        emit("response.output_item.done", {{"output_index", text_index_}, {"item", output_[static_cast<size_t>(text_index_)]}});
    text_index_ = -1;
    return ok;
  }
  bool call_delta(const Json& call) {
    bool ok = true;
    if (call.contains("id") && call["id"].is_string()) {  // a new call starts
      ok = close_text() && close_call();
      call_index_ = static_cast<int>(output_.size());
      call_item_ = {{"type", "function_call"}, {"id", random_id("fc_")}, {"call_id", call["id"]},
                    {"name", call["function"].value("name", "")}, {"arguments", ""}, {"status", "in_progress"}};
      output_.push_back(call_item_);
      ok = ok && emit("response.output_item.added", {{"output_index", call_index_}, {"item", call_item_}});
    }
    const std::string piece = call.contains("function") ? call["function"].value("arguments", "") : "";
    if (call_index_ < 0 || piece.empty()) return ok;
    call_item_["arguments"] = call_item_["arguments"].get<std::string>() + piece;
    return ok && emit("response.function_call_arguments.delta",
                      {{"item_id", call_item_["id"]}, {"output_index", call_index_}, {"delta", piece}});
  }
  bool close_call() {
    if (call_index_ < 0) return true;
    call_item_["status"] = "completed";
    output_[static_cast<size_t>(call_index_)] = call_item_;
    const bool ok = emit("response.function_call_arguments.done",
                         {{"item_id", call_item_["id"]}, {"output_index", call_index_}, {"arguments", call_item_["arguments"]}}) &&
                    emit("response.output_item.done", {{"output_index", call_index_}, {"item", call_item_}});
    call_index_ = -1;
    return ok;
  }
  bool finish() {
    const bool ok = close_text() && close_call();
    const std::string status = finish_reason_ == "length" ? "incomplete" : "completed";
    return ok && emit(status == "completed" ? "response.completed" : "response.incomplete", {{"response", snapshot(status)}});
  }

  ResponseWriter& inner_;
  std::string id_ = random_id("resp_");
  Json model_;
  int64_t created_ = 0;
  int64_t sequence_ = 0;
  bool started_ = false;
  Json output_ = Json::array();
  Json usage_;
  std::string finish_reason_;
  int text_index_ = -1;
  std::string text_id_, text_;
  int call_index_ = -1;
  Json call_item_;
};

}  // namespace

void handle_responses(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer) {
  Json body;
  if (auto error = parse_json_body(request.body, body)) return (void)writer.respond(error_response(*error));
  Json chat;
  if (auto error = chat_body_of(body, chat)) return (void)writer.respond(error_response(*error));
  if (chat.value("stream", false)) chat["stream_options"] = {{"include_usage", true}};
  HttpRequest chat_request;
  chat_request.method = request.method;
  chat_request.path = "/v1/chat/completions";
  chat_request.headers = request.headers;
  const std::string text = chat.dump();
  chat_request.body.assign(text.begin(), text.end());
  ResponsesStreamWriter translating(writer);
  handle_chat_completions(context, chat_request, translating);
}

}  // namespace pagellm::server
