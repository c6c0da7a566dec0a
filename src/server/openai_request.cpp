#include "server/openai_request.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "server/json_fields.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxStopStrings = 16;
constexpr size_t kMaxStopTokenIds = 256;
constexpr double kMinRepetitionPenalty = 1e-6;

void read_common(JsonFields& fields, const Json& body, const ParseOptions& options, CommonFields& out) {
  SamplingParams& s = out.sampling;
  if (auto v = fields.number("temperature", 0.0, 1e6)) s.temperature = static_cast<float>(*v);
  // Ranges are checked on the double received, then narrowed so the float keeps the meaning: a
  // top_p below the smallest float still keeps only the most likely token.
  if (auto v = fields.number("top_p", 0.0, 1.0)) {
    if (*v <= 0.0) fields.fail("top_p", fmt::format("[openai] 'top_p' must be in (0, 1], got {}", *v));
    else s.top_p = std::max(static_cast<float>(*v), std::numeric_limits<float>::denorm_min());
  }
  if (auto v = fields.integer("top_k", -1, INT32_MAX)) s.top_k = static_cast<int>(*v);
  if (auto v = fields.number("min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = fields.integer("seed", INT64_MIN, INT64_MAX)) s.seed = static_cast<uint64_t>(*v);
  if (auto v = fields.integer("min_tokens", 0, INT32_MAX)) s.min_tokens = static_cast<int>(*v);
  if (auto v = fields.boolean("ignore_eos")) s.ignore_eos = *v;
  if (auto v = fields.number("presence_penalty", -2.0, 2.0)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = fields.number("frequency_penalty", -2.0, 2.0)) s.frequency_penalty = static_cast<float>(*v);
  // Logits are divided by the penalty in float: below 1e-6 they overflow to inf (then NaN).
  if (auto v = fields.number("repetition_penalty", kMinRepetitionPenalty, 1e6)) s.repetition_penalty = static_cast<float>(*v);
  if (auto ids = fields.integer_list("stop_token_ids", 0, options.vocab_size - 1, kMaxStopTokenIds))
    for (int64_t id : *ids) s.stop_token_ids.push_back(static_cast<TokenId>(id));
  // max_completion_tokens is the newer name; either is accepted (the newer one wins).
  out.max_tokens = fields.integer("max_tokens", 1, INT64_MAX);
  if (auto v = fields.integer("max_completion_tokens", 1, INT64_MAX)) out.max_tokens = v;
  if (auto v = fields.string_or_list("stop", kMaxStopStrings))
    for (std::string& stop : *v)
      if (!stop.empty()) out.stop.push_back(std::move(stop));
  if (auto v = fields.integer("n", 1, options.max_n)) out.n = static_cast<int>(*v);
  if (auto v = fields.boolean("stream")) out.stream = *v;
  if (auto v = fields.integer("prompt_logprobs", 0, options.max_logprobs)) {
    out.sampling.num_prompt_logprobs = static_cast<int>(*v);
    // As vLLM: they come with the whole response, which a stream never sends.
    if (out.stream) fields.fail("prompt_logprobs", "[openai] 'prompt_logprobs' are not available when 'stream' is true");
  }
  if (auto v = fields.boolean("skip_special_tokens")) out.skip_special_tokens = *v;
  if (auto v = fields.boolean("include_stop_str_in_output")) out.include_stop_str_in_output = *v;
  if (auto v = fields.boolean("add_special_tokens")) out.add_special_tokens = *v;
  if (const Json* stream_options = fields.get("stream_options")) {
    if (!stream_options->is_object()) {
      fields.fail("stream_options", "[openai] 'stream_options' must be an object", "invalid_type");
    } else {
      JsonFields inner(*stream_options);
      if (auto v = inner.boolean("include_usage")) out.include_usage = *v;
      if (!inner.ok()) fields.fail("stream_options.include_usage", inner.error()->message, inner.error()->code);
      if (inner.boolean("continuous_usage_stats").value_or(false))
        fields.fail("stream_options.continuous_usage_stats",
                    "[openai] 'stream_options.continuous_usage_stats' is not supported", "not_supported");
    }
  }
  (void)body;
}

// Known OpenAI and vLLM request fields that pagellm does not implement: a 400 naming the field
// rather than an answer that quietly ignores it. A value that asks for the default behaviour is
// accepted. Fields nobody defines are ignored, as vLLM ignores them.
struct UnsupportedField {
  const char* name;
  Json accepted;  // values that change nothing (a list; empty: none)
};

std::optional<ApiError> check_unsupported(const Json& body, bool is_chat) {
  static const std::vector<UnsupportedField> common = {
      {"best_of", Json::array({1})},          {"use_beam_search", Json::array({false})},
      {"length_penalty", Json::array({1})},   {"allowed_token_ids", Json::array()},
      {"bad_words", Json::array()},           {"logits_processors", Json::array()},
      {"truncate_prompt_tokens", Json::array()}, {"spaces_between_special_tokens", Json::array({true})},
      {"return_tokens_as_token_ids", Json::array({false})}, {"return_token_ids", Json::array({false})},
      {"prompt_embeds", Json::array()},       {"kv_transfer_params", Json::array()},
      {"vllm_xargs", Json::array()},          {"cache_salt", Json::array()},
      {"priority", Json::array({0})},         {"request_id", Json::array()},
      {"store", Json::array({false})},        {"service_tier", Json::array({"auto", "default"})},
      {"structural_tag", Json::array()},
      {"guided_whitespace_pattern", Json::array()},
  };
  static const std::vector<UnsupportedField> chat = {
      {"functions", Json::array()},           {"function_call", Json::array()},
      {"audio", Json::array()},               {"modalities", Json::array({Json::array({"text"})})},
      {"prediction", Json::array()},          {"web_search_options", Json::array()},
      {"verbosity", Json::array()},           {"reasoning_effort", Json::array()},
      {"documents", Json::array()},           {"chat_template", Json::array()},
      {"continue_final_message", Json::array({false})}, {"echo", Json::array({false})},
      {"mm_processor_kwargs", Json::array()}, {"media_io_kwargs", Json::array()},
  };
  for (const auto* table : {&common, is_chat ? &chat : nullptr}) {
    if (!table) continue;
    for (const UnsupportedField& field : *table) {
      auto it = body.find(field.name);
      if (it == body.end() || it->is_null()) continue;
      if (std::find(field.accepted.begin(), field.accepted.end(), *it) != field.accepted.end()) continue;
      return ApiError{400, fmt::format("[openai] '{}' is not supported by this server", field.name), field.name,
                      "not_supported"};
    }
  }
  return std::nullopt;
}

// A prompt of token ids: [1, 2, 3].
bool is_id_list(const Json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const Json& item : value)
    if (!item.is_number_integer()) return false;
  return true;
}

std::optional<ApiError> read_prompts(const Json& body, const ParseOptions& options, CompletionRequest& out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null())
    return bad_request("[openai] 'prompt' is required", "prompt", "missing_required_parameter");
  const Json& prompt = *it;
  const auto shape_error = [] {
    return bad_request("[openai] 'prompt' must be a string, a list of strings, a list of token ids or a list of "
                       "lists of token ids (none empty)", "prompt", "invalid_type");
  };
  if (prompt.is_string()) {
    out.prompt_texts.push_back(prompt.get<std::string>());
  } else if (is_id_list(prompt)) {
    out.prompt_ids.emplace_back();
    for (const Json& id : prompt) {
      if (id.is_number_unsigned() ? id.get<uint64_t>() >= static_cast<uint64_t>(options.vocab_size)
                                  : (id.get<int64_t>() < 0 || id.get<int64_t>() >= options.vocab_size))
        return bad_request(fmt::format("[openai] prompt token id {} is outside the vocabulary (vocab_size {})",
                                       id.dump(), options.vocab_size), "prompt");
      out.prompt_ids.back().push_back(static_cast<TokenId>(id.get<int64_t>()));
    }
  } else if (prompt.is_array() && !prompt.empty()) {
    if (prompt.size() > static_cast<size_t>(options.max_prompts))
      return bad_request(fmt::format("[openai] at most {} prompts per request", options.max_prompts), "prompt");
    for (const Json& item : prompt) {
      if (item.is_string()) {
        if (!out.prompt_ids.empty()) return shape_error();
        out.prompt_texts.push_back(item.get<std::string>());
      } else if (is_id_list(item)) {
        if (!out.prompt_texts.empty()) return shape_error();
        CompletionRequest one;
        if (auto error = read_prompts(Json{{"prompt", item}}, options, one)) return error;
        out.prompt_ids.push_back(std::move(one.prompt_ids.front()));
      } else {
        return shape_error();
      }
    }
  } else {
    return shape_error();
  }
  return std::nullopt;
}

// One chat message for the template: content as one string (text parts joined with "\n", as
// vLLM does); every other field (tool_calls, tool_call_id, name, reasoning_content) passes through.
std::optional<ApiError> normalize_message(const Json& message, size_t index, Json& out) {
  const std::string param = fmt::format("messages[{}]", index);
  if (!message.is_object()) return bad_request(fmt::format("[openai] {} must be an object", param), param, "invalid_type");
  auto role = message.find("role");
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  if (role == message.end() || !role->is_string() ||
      std::none_of(std::begin(kRoles), std::end(kRoles), [&](const char* r) { return *role == r; }))
    return bad_request(fmt::format("[openai] {}.role must be one of system, developer, user, assistant, tool", param),
                       param + ".role");
  out = message;
  auto content = message.find("content");
  if (content == message.end() || content->is_null()) {
    if (*role != "assistant")
      return bad_request(fmt::format("[openai] {}.content is required", param), param + ".content",
                         "missing_required_parameter");
    out["content"] = "";  // an assistant turn of tool calls only: templates get "" (as from vLLM)
    return std::nullopt;
  }
  if (content->is_string()) return std::nullopt;
  if (!content->is_array())
    return bad_request(fmt::format("[openai] {}.content must be a string or a list of content parts", param),
                       param + ".content", "invalid_type");
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    const Json& part = (*content)[i];
    const std::string part_param = fmt::format("{}.content[{}]", param, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      return bad_request(fmt::format("[openai] {} must be an object with a 'type'", part_param), part_param, "invalid_type");
    if (part["type"] != "text")
      return ApiError{400, fmt::format("[openai] {}: content parts of type '{}' are not supported (text only)",
                                       part_param, part["type"].get<std::string>()), part_param + ".type", "not_supported"};
    if (!part.contains("text") || !part["text"].is_string())
      return bad_request(fmt::format("[openai] {}.text must be a string", part_param), part_param + ".text", "invalid_type");
    if (i > 0) text += "\n";
    text += part["text"].get<std::string>();
  }
  out["content"] = text;
  return std::nullopt;
}

// An assistant turn's tool_calls as vLLM hands them to templates: each function's arguments (a
// JSON string in the API) parsed into a mapping ({} when it is not JSON), an empty list dropped;
// "reasoning" is also given as "reasoning_content".
std::optional<ApiError> normalize_assistant_turn(Json& message, size_t index) {
  if (message.contains("reasoning") && !message.contains("reasoning_content"))
    message["reasoning_content"] = message["reasoning"];
  auto calls = message.find("tool_calls");
  if (calls == message.end()) return std::nullopt;
  const std::string param = fmt::format("messages[{}].tool_calls", index);
  if (calls->is_null() || (calls->is_array() && calls->empty())) {
    message.erase("tool_calls");
    return std::nullopt;
  }
  if (!calls->is_array()) return bad_request(fmt::format("[openai] {} must be a list", param), param, "invalid_type");
  for (size_t i = 0; i < calls->size(); ++i) {
    Json& call = (*calls)[i];
    const std::string call_param = fmt::format("{}[{}].function", param, i);
    Json* function = call.is_object() && call.contains("function") ? &call["function"] : nullptr;
    if (!function || !function->is_object() || !function->contains("name") || !(*function)["name"].is_string())
      return bad_request(fmt::format("[openai] {} must be an object with a 'name'", call_param), call_param,
                         "invalid_type");
    Json& arguments = (*function)["arguments"];
    if (arguments.is_string()) arguments = Json::parse(arguments.get<std::string>(), nullptr, false);
    if (!arguments.is_object() && !arguments.is_array()) arguments = Json::object();
  }
  return std::nullopt;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}].
std::optional<ApiError> read_tools(const Json& tools, Json& out) {
  if (!tools.is_array()) return bad_request("[openai] 'tools' must be a list", "tools", "invalid_type");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string param = fmt::format("tools[{}]", i);
    if (!tool.is_object()) return bad_request(fmt::format("[openai] {} must be an object", param), param, "invalid_type");
    if (tool.contains("type") && tool["type"] != "function")
      return ApiError{400, fmt::format("[openai] {}.type: only tools of type 'function' are supported", param),
                      param + ".type", "not_supported"};
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object() || !function->contains("name") ||
        !(*function)["name"].is_string() || (*function)["name"].get<std::string>().empty())
      return bad_request(fmt::format("[openai] {}.function must be an object with a non-empty 'name'", param),
                         param + ".function", "invalid_type");
    const auto parameters = function->find("parameters");
    if (parameters != function->end() && !parameters->is_null() && !parameters->is_object())
      return bad_request(fmt::format("[openai] {}.function.parameters must be a JSON Schema object", param),
                         param + ".function.parameters", "invalid_type");
  }
  out = tools;
  return std::nullopt;
}

bool has_tool(const Json& tools, const std::string& name) {
  for (const Json& tool : tools)
    if (tool["function"]["name"] == name) return true;
  return false;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name": ...}}.
// Without tools there is nothing to call: "none"/"auto" mean no calls, the others are an error.
std::optional<ApiError> read_tool_choice(JsonFields& fields, const Json& tools, ToolChoice& out) {
  using Mode = ToolChoice::Mode;
  out.mode = tools.empty() ? Mode::kNone : Mode::kAuto;
  const Json* choice = fields.get("tool_choice");
  if (choice && choice->is_string()) {
    const std::string name = choice->get<std::string>();
    if (name == "none") out.mode = Mode::kNone;
    else if (name == "required") out.mode = Mode::kRequired;
    else if (name != "auto")
      return bad_request("[openai] 'tool_choice' must be \"none\", \"auto\", \"required\" or a named function",
                         "tool_choice");
  } else if (choice && choice->is_object()) {
    const auto function = choice->find("function");
    if (choice->value("type", "") != "function" || function == choice->end() || !function->is_object() ||
        !function->contains("name") || !(*function)["name"].is_string())
      return bad_request("[openai] a named 'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                         "tool_choice", "invalid_type");
    out.mode = Mode::kNamed;
    out.function = (*function)["name"].get<std::string>();
    if (!has_tool(tools, out.function))
      return bad_request(fmt::format("[openai] tool_choice names the function '{}', which is not in 'tools'", out.function),
                         "tool_choice");
  } else if (choice) {
    return bad_request("[openai] 'tool_choice' must be a string or an object", "tool_choice", "invalid_type");
  }
  if (tools.empty() && (out.mode == Mode::kRequired || out.mode == Mode::kNamed))
    return bad_request("[openai] 'tool_choice' required or named needs 'tools'", "tool_choice");
  if (tools.empty()) out.mode = Mode::kNone;
  return std::nullopt;
}

std::optional<ApiError> read_chat_tools(JsonFields& fields, ChatRequest& out) {
  if (const Json* tools = fields.get("tools"))
    if (auto error = read_tools(*tools, out.tools)) return error;
  if (auto error = read_tool_choice(fields, out.tools, out.tool_choice)) return error;
  if (auto v = fields.boolean("parallel_tool_calls")) out.parallel_tool_calls = *v;
  if (auto v = fields.boolean("include_reasoning")) out.include_reasoning = *v;
  const ToolChoice::Mode mode = out.tool_choice.mode;
  if (mode == ToolChoice::Mode::kRequired || mode == ToolChoice::Mode::kNamed)
    out.guided_json_schema = tool_choice_schema(out.tool_choice, out.tools, out.parallel_tool_calls);
  return std::nullopt;
}

std::optional<ApiError> read_chat_inputs(const Json& body, JsonFields& fields, ChatTemplateInputs& inputs) {
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null())
    return bad_request("[openai] 'messages' is required", "messages", "missing_required_parameter");
  if (!messages->is_array()) return bad_request("[openai] 'messages' must be a list", "messages", "invalid_type");
  if (messages->empty()) return bad_request("[openai] 'messages' must not be empty", "messages");
  inputs.messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    Json message;
    if (auto error = normalize_message((*messages)[i], i, message)) return error;
    if (message["role"] == "assistant")
      if (auto error = normalize_assistant_turn(message, i)) return error;
    inputs.messages.push_back(std::move(message));
  }
  if (const Json* kwargs = fields.get("chat_template_kwargs")) {
    if (!kwargs->is_object()) fields.fail("chat_template_kwargs", "[openai] 'chat_template_kwargs' must be an object", "invalid_type");
    else inputs.extra_kwargs = *kwargs;
  }
  inputs.add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_json_body(std::string_view body, Json& out) {
  if (json_nesting_depth(body) > kMaxJsonDepth)
    return bad_request(fmt::format("[openai] the request body nests deeper than {} levels", kMaxJsonDepth));
  out = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out.is_discarded())
    return bad_request("[openai] the request body is not valid JSON (UTF-8 text)", "", "invalid_json");
  if (!out.is_object()) return bad_request("[openai] the request body must be a JSON object", "", "invalid_json");
  return std::nullopt;
}

std::optional<ApiError> check_model(const Json& body, const ParseOptions& options) {
  auto model = body.find("model");
  if (model == body.end() || model->is_null())
    return bad_request(fmt::format("[openai] 'model' is required (this server serves '{}')", options.served_model_name),
                       "model", "missing_required_parameter");
  if (!model->is_string()) return bad_request("[openai] 'model' must be a string", "model", "invalid_type");
  const auto& aliases = options.model_aliases;
  if (*model != options.served_model_name && std::find(aliases.begin(), aliases.end(), *model) == aliases.end())
    return ApiError{404, fmt::format("[openai] the model '{}' does not exist; this server serves '{}'",
                                     model->get<std::string>(), options.served_model_name), "model", "model_not_found"};
  return std::nullopt;
}

std::optional<ApiError> check_token_ids(const std::vector<TokenId>& ids, int64_t vocab_size, const char* param) {
  for (TokenId id : ids)
    if (id < 0 || id >= vocab_size)
      return bad_request(fmt::format("[openai] token id {} is outside the vocabulary (vocab_size {})", id, vocab_size),
                         param);
  return std::nullopt;
}

std::optional<ApiError> parse_completion_request(const Json& body, const ParseOptions& options, CompletionRequest& out) {
  if (auto error = check_model(body, options)) return error;
  if (auto error = check_unsupported(body, /*is_chat=*/false)) return error;
  JsonFields fields(body);
  if (fields.get("suffix"))
    return ApiError{400, "[openai] 'suffix' is not supported", "suffix", "not_supported"};
  if (auto error = read_prompts(body, options, out)) return error;
  read_common(fields, body, options, out.common);
  if (auto v = fields.boolean("echo")) out.echo = *v;
  if (auto v = fields.integer("logprobs", 0, options.max_logprobs)) out.num_logprobs = static_cast<int>(*v);
  if (!fields.ok()) return fields.error();
  if (out.echo && out.num_logprobs)
    return ApiError{400, "[openai] 'echo' together with 'logprobs' (prompt logprobs) is not supported", "echo",
                    "not_supported"};
  out.common.sampling.num_logprobs = out.num_logprobs;
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(const Json& body, const ParseOptions& options, ChatRequest& out) {
  if (auto error = check_model(body, options)) return error;
  if (auto error = check_unsupported(body, /*is_chat=*/true)) return error;
  JsonFields fields(body);
  if (auto error = read_chat_inputs(body, fields, out.template_inputs)) return error;
  if (auto error = read_chat_tools(fields, out)) return error;
  // The template sees the tools unless the request said tool_choice "none".
  if (out.tool_choice.mode != ToolChoice::Mode::kNone) out.template_inputs.tools = out.tools;
  read_common(fields, body, options, out.common);
  if (auto v = fields.boolean("logprobs")) out.logprobs = *v;
  if (auto v = fields.integer("top_logprobs", 0, options.max_logprobs)) out.top_logprobs = static_cast<int>(*v);
  if (!fields.ok()) return fields.error();
  if (out.top_logprobs > 0 && !out.logprobs)
    return bad_request("[openai] 'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (out.logprobs) out.common.sampling.num_logprobs = out.top_logprobs;
  return std::nullopt;
}

std::optional<ApiError> check_tool_choice_servable(const ChatRequest& request, const ParseOptions& options) {
  if (request.tool_choice.mode != ToolChoice::Mode::kAuto || options.auto_tool_choice) return std::nullopt;
  return bad_request("[openai] \"auto\" tool choice (the default with 'tools') needs the server started with "
                     "--enable-auto-tool-choice and --tool-call-parser; or send tool_choice \"none\", "
                     "\"required\" or a named function", "tool_choice", "not_supported");
}

std::optional<ApiError> fit_max_tokens(const CommonFields& common, int num_prompt_tokens, int max_model_len,
                                       int& max_tokens) {
  if (common.max_tokens) {
    if (num_prompt_tokens + *common.max_tokens > max_model_len)
      return bad_request(fmt::format("[openai] this model's maximum context length is {} tokens, but the prompt has "
                                     "{} tokens and max_tokens is {} ({} in total); shorten the prompt or lower "
                                     "max_tokens", max_model_len, num_prompt_tokens, *common.max_tokens,
                                     num_prompt_tokens + *common.max_tokens), "max_tokens");
    max_tokens = static_cast<int>(*common.max_tokens);
  } else {
    if (num_prompt_tokens >= max_model_len)
      return bad_request(fmt::format("[openai] the prompt has {} tokens, which leaves no room for output within this "
                                     "model's maximum context length of {} tokens", num_prompt_tokens, max_model_len),
                         "prompt");
    max_tokens = max_model_len - num_prompt_tokens;
  }
  if (common.sampling.min_tokens > max_tokens)
    return bad_request(fmt::format("[openai] 'min_tokens' ({}) must not exceed max_tokens ({})",
                                   common.sampling.min_tokens, max_tokens), "min_tokens");
  return std::nullopt;
}

}  // namespace pagellm::server
