#include "server/openai_serving.h"

#include <variant>

#include <fmt/format.h>

#include "server/choice_streams.h"
#include "server/openai_logprobs.h"
#include "server/openai_response.h"
#include "server/reasoning_end.h"
#include "server/reasoning_parser.h"
#include "server/structured_request.h"
#include "server/tool_parser_choice.h"

namespace pagellm::server {

using Json = nlohmann::ordered_json;

namespace {

constexpr int kMaxChoicesPerRequest = 1024;  // prompts × n

struct Prompt {
  std::vector<TokenId> ids;
  std::string echo_text;  // completions with echo: the prompt's text, sent before the output
};

enum class LogprobMode { kNone, kCompletion, kChat };

// One API request, route-independent: prompts × n choices (choice index = prompt * n + sample).
struct Generation {
  ResponseMeta meta;
  std::vector<Prompt> prompts;
  CommonFields common;
  LogprobMode logprobs = LogprobMode::kNone;
  // Chat whose text is parsed into reasoning, content and tool calls (nullopt: text is content).
  std::optional<ChatOutputOptions> chat_output;
  std::string chat_prompt;      // the rendered prompt (qwen3's reasoning parser reads its end)
  bool include_reasoning = true;
};

// The running state of one choice.
struct ChoiceState {
  std::string text;
  int64_t num_tokens = 0;
  Json logprobs;          // the API's logprobs object, built as tokens arrive
  int text_offset = 0;    // completions logprobs
  bool has_output = false;
  std::optional<FinishReason> finish_reason;
  std::unique_ptr<OutputParser> parser;  // chat output parsing; null: text is content
  bool called_tools = false;             // streamed: a tool call went out
  Json prompt_logprobs;                  // vLLM's prompt_logprobs list, when asked
};

std::vector<ChoiceState> make_choices(const Generation& generation) {
  std::vector<ChoiceState> choices(generation.prompts.size() * static_cast<size_t>(generation.common.n));
  if (generation.chat_output)
    for (ChoiceState& choice : choices) choice.parser = make_chat_output_parser(*generation.chat_output, generation.chat_prompt);
  return choices;
}

// A whole chat choice read by its output parser.
Json parsed_chat_choice(const Generation& generation, int index, ChoiceState& choice) {
  ParsedMessage message = parse_whole(*choice.parser, choice.text);
  if (!generation.include_reasoning) message.reasoning.clear();
  const bool with_reasoning = !generation.chat_output->reasoning_parser.empty();
  return chat_choice(index, chat_message(message, with_reasoning), choice.logprobs,
                     chat_finish_reason(choice.finish_reason, !message.tool_calls.empty()));
}

std::variant<std::vector<GenerateRequest>, ApiError> build_requests(const ServingContext& context,
                                                                    const Generation& generation) {
  const int n = generation.common.n;
  if (generation.prompts.size() * static_cast<size_t>(n) > kMaxChoicesPerRequest)
    return bad_request(fmt::format("[openai] prompts × n must be at most {}", kMaxChoicesPerRequest), "n");
  // More choices than the engine ever holds at once: a 429 ("retry later") could never succeed.
  const int max_waiting = context.engine->config().max_waiting;
  if (generation.prompts.size() * static_cast<size_t>(n) > static_cast<size_t>(max_waiting))
    return bad_request(fmt::format("[openai] prompts × n is {}, more than this server ever runs at once "
                                   "(--max-waiting {})", generation.prompts.size() * static_cast<size_t>(n),
                                   max_waiting), "n");
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if (generation.common.constraint) {
    auto compiler = context.engine->grammar_compiler();
    if (!compiler.has_value()) return api_error_from_status(compiler.status(), generation.common.constraint_param);
    auto compiled = (*compiler)->compile(*generation.common.constraint);
    if (!compiled.has_value()) return api_error_from_status(compiled.status(), generation.common.constraint_param);
    grammar = std::move(compiled).value();
  }
  std::vector<GenerateRequest> requests;
  for (const Prompt& prompt : generation.prompts) {
    int max_tokens = 0;
    if (auto error = fit_max_tokens(generation.common, static_cast<int>(prompt.ids.size()), context.max_model_len,
                                    max_tokens))
      return *error;
    // A reasoning model's answer is constrained after its reasoning (chat only: completions have
    // no reasoning parser reading their text).
    std::vector<TokenId> grammar_starts_after;
    if (grammar && generation.chat_output && context.tokenizer)
      grammar_starts_after = grammar_start_marker(generation.chat_output->reasoning_parser, *context.tokenizer, prompt.ids);
    for (int sample = 0; sample < n; ++sample) {
      GenerateRequest request;
      request.prompt_token_ids = prompt.ids;
      request.sampling = generation.common.sampling;
      request.sampling.max_tokens = max_tokens;
      // n samples of one seeded request must differ from each other yet be reproducible.
      if (request.sampling.seed) *request.sampling.seed += static_cast<uint64_t>(sample);
      request.stop_strings = generation.common.stop;
      request.skip_special_tokens = generation.common.skip_special_tokens;
      request.include_stop_string = generation.common.include_stop_str_in_output;
      request.grammar = grammar;
      request.grammar_starts_after = grammar_starts_after;
      requests.push_back(std::move(request));
    }
  }
  return requests;
}

// The logprobs object for the tokens of one output (null without logprobs).
Json output_logprobs(const LogprobFormatter& formatter, LogprobMode mode, const RequestOutput& out, int& text_offset) {
  if (mode == LogprobMode::kNone) return nullptr;
  if (mode == LogprobMode::kCompletion) {
    Json logprobs = LogprobFormatter::empty_completion_logprobs();
    formatter.append_completion(logprobs, out.token_ids, out.logprobs, text_offset);
    return logprobs;
  }
  Json content = Json::array();
  formatter.append_chat(content, out.token_ids, out.logprobs);
  return Json{{"content", std::move(content)}};
}

void merge_logprobs(LogprobMode mode, Json& into, const Json& part) {
  if (mode == LogprobMode::kNone) return;
  if (into.is_null()) {
    into = part;
    return;
  }
  for (auto& [key, values] : part.items())
    for (const Json& value : values) into[key].push_back(value);
}

Usage usage_of(const Generation& generation, const std::vector<ChoiceState>& choices) {
  Usage usage;
  for (const Prompt& prompt : generation.prompts) usage.prompt_tokens += static_cast<int64_t>(prompt.ids.size());
  for (const ChoiceState& choice : choices) usage.completion_tokens += choice.num_tokens;
  return usage;
}

void respond_whole(const ServingContext& context, const Generation& generation, ChoiceStreams& streams,
                   ResponseWriter& writer) {
  const LogprobFormatter formatter(context.tokenizer.get());
  const int n = generation.common.n;
  std::vector<ChoiceState> choices = make_choices(generation);
  while (std::optional<ChoiceOutput> next = streams.next(writer)) {
    ChoiceState& choice = choices[static_cast<size_t>(next->index)];
    const RequestOutput& out = next->output;
    if (!out.error.is_ok()) {
      streams.abort_unfinished();
      writer.respond(error_response(api_error_from_status(out.error)));
      return;
    }
    choice.text += out.text;
    choice.num_tokens += static_cast<int64_t>(out.token_ids.size());
    if (generation.common.sampling.num_prompt_logprobs && choice.prompt_logprobs.is_null() && !out.token_ids.empty())
      choice.prompt_logprobs = formatter.prompt_logprobs(out.prompt_logprobs);
    merge_logprobs(generation.logprobs, choice.logprobs,
                   output_logprobs(formatter, generation.logprobs, out, choice.text_offset));
    if (out.finish_reason) choice.finish_reason = out.finish_reason;
  }
  if (streams.client_gone()) return;  // nobody to answer; the requests are aborted
  Json body_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i].parser) {
      body_choices.push_back(parsed_chat_choice(generation, static_cast<int>(i), choices[i]));
      continue;
    }
    const std::string& echo = generation.prompts[i / static_cast<size_t>(n)].echo_text;
    body_choices.push_back(response_choice(generation.meta.kind, static_cast<int>(i), echo + choices[i].text,
                                           choices[i].logprobs, choices[i].finish_reason));
  }
  Json body = whole_response(generation.meta, std::move(body_choices), usage_of(generation, choices));
  // vLLM's places: per choice for completions (a choice per prompt), once per chat response.
  if (generation.common.sampling.num_prompt_logprobs) {
    if (generation.meta.kind == ApiKind::kChat) {
      body["prompt_logprobs"] = choices.empty() ? Json() : choices[0].prompt_logprobs;
    } else {
      for (size_t i = 0; i < choices.size(); ++i) body["choices"][i]["prompt_logprobs"] = choices[i].prompt_logprobs;
    }
  }
  HttpResponse response;
  response.body = to_json_text(body);
  writer.respond(response);
}

// One streamed chat output read by the choice's output parser; nullopt when there is nothing to send.
std::optional<Json> parsed_chat_chunk(const Generation& generation, const ChoiceOutput& next, ChoiceState& choice,
                                      Json logprobs) {
  const RequestOutput& out = next.output;
  MessageDelta delta;
  choice.parser->feed(out.text, delta);
  if (out.finish_reason) choice.parser->finish(delta);
  if (!generation.include_reasoning) delta.reasoning.clear();
  choice.called_tools = choice.called_tools || !delta.tool_calls.empty();
  if (delta.empty() && choice.has_output && !out.finish_reason && logprobs.is_null()) return std::nullopt;
  return chat_delta_chunk(generation.meta, next.index, delta, /*with_role=*/!choice.has_output, std::move(logprobs),
                          chat_finish_reason(out.finish_reason, choice.called_tools), generation.common.include_usage);
}

// SSE: the 200 and its headers go out with the first output, so a request the engine refuses at
// once still gets a proper HTTP error.
void respond_stream(const ServingContext& context, const Generation& generation, ChoiceStreams& streams,
                    ResponseWriter& writer) {
  const LogprobFormatter formatter(context.tokenizer.get());
  const int n = generation.common.n;
  std::vector<ChoiceState> choices = make_choices(generation);
  bool started = false;
  while (std::optional<ChoiceOutput> next = streams.next(writer)) {
    ChoiceState& choice = choices[static_cast<size_t>(next->index)];
    const RequestOutput& out = next->output;
    if (!out.error.is_ok()) {
      streams.abort_unfinished();
      const ApiError error = api_error_from_status(out.error);
      if (!started) {
        writer.respond(error_response(error));
      } else {
        writer.write_chunk("data: " + error_json(error) + "\n\n");
        writer.write_chunk(kSseDone);
        writer.end_stream();
      }
      return;
    }
    if (!started) {
      started = true;
      if (!writer.start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) break;
    }
    Json logprobs = output_logprobs(formatter, generation.logprobs, out, choice.text_offset);
    choice.num_tokens += static_cast<int64_t>(out.token_ids.size());
    Json event;
    if (choice.parser) {
      std::optional<Json> parsed = parsed_chat_chunk(generation, *next, choice, std::move(logprobs));
      if (!parsed) continue;  // all held back (a tag being decided): nothing to send yet
      event = std::move(*parsed);
    } else {
      std::string text = out.text;
      if (!choice.has_output) text = generation.prompts[static_cast<size_t>(next->index / n)].echo_text + text;
      event = chunk(generation.meta, next->index, text, /*with_role=*/!choice.has_output, std::move(logprobs),
                    out.finish_reason, generation.common.include_usage);
    }
    choice.has_output = true;
    if (!writer.write_chunk(sse_event(event))) break;  // client gone: abort below
  }
  if (streams.client_gone() || !started || writer.client_gone()) {
    streams.abort_unfinished();
    return;
  }
  if (generation.common.include_usage)
    writer.write_chunk(sse_event(usage_chunk(generation.meta, usage_of(generation, choices))));
  writer.write_chunk(kSseDone);
  writer.end_stream();
}

void generate(const ServingContext& context, const Generation& generation, ResponseWriter& writer) {
  auto requests = build_requests(context, generation);
  if (auto* error = std::get_if<ApiError>(&requests)) {
    writer.respond(error_response(*error));
    return;
  }
  auto submitted = ChoiceStreams::submit(*context.engine, std::move(std::get<0>(requests)));
  if (auto* error = std::get_if<ApiError>(&submitted)) {
    writer.respond(error_response(*error));
    return;
  }
  ChoiceStreams& streams = *std::get<0>(submitted);
  if (generation.common.stream) respond_stream(context, generation, streams, writer);
  else respond_whole(context, generation, streams, writer);
}

std::optional<ApiError> tokenize_text(const ServingContext& context, const std::string& text, bool add_special_tokens,
                                      const char* param, std::vector<TokenId>& ids) {
  if (!context.tokenizer)
    return bad_request("[openai] this model has no tokenizer.json: send prompts as token ids", param);
  if (context.max_prompt_bytes > 0 && text.size() > context.max_prompt_bytes)
    return bad_request(fmt::format("[openai] the prompt has {} bytes, more than {} tokens (this model's maximum "
                                   "context length) can hold", text.size(), context.max_model_len), param);
  Expected<std::vector<int32_t>> encoded = context.tokenizer->encode(text, add_special_tokens);
  if (!encoded.has_value()) return api_error_from_status(encoded.status(), param);
  ids = std::move(encoded).value();
  if (ids.empty()) return bad_request("[openai] the prompt is empty", param);
  return std::nullopt;
}

// Which output parsers read this chat request's text: the server's reasoning parser, and for tools
// its tool-call parser (tool_choice auto) or the required/named reader. Parsers that read special
// tokens keep them in the text (as vLLM's Mistral and harmony paths do).
void set_chat_output(const ServingContext& context, const ChatRequest& parsed, Generation& generation) {
  ChatOutputOptions options;
  options.reasoning_parser = context.reasoning_parser;
  options.tool_parser = context.tool_call_parser;
  options.tool_choice = parsed.tool_choice;
  options.tools = parsed.tools;
  options.parallel_tool_calls = parsed.parallel_tool_calls;
  const bool reads_tools = options.tool_choice.mode != ToolChoice::Mode::kNone;
  if (options.reasoning_parser.empty() && !reads_tools) return;
  if (reasoning_parser_needs_special_tokens(options.reasoning_parser) ||
      (options.tool_choice.mode == ToolChoice::Mode::kAuto && tool_parser_needs_special_tokens(options.tool_parser)))
    generation.common.skip_special_tokens = false;
  generation.chat_output = std::move(options);
  generation.include_reasoning = parsed.include_reasoning;
}

// Responses name the model as the request did (one of the served names), as vLLM does.
std::string answered_model_name(const ServingContext& context, const Json& body) {
  const auto model = body.find("model");
  return model != body.end() && model->is_string() ? model->get<std::string>() : context.served_model_name;
}

}  // namespace

void handle_completions(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer) {
  Json body;
  CompletionRequest parsed;
  std::optional<ApiError> error = parse_json_body(request.body, body);
  if (!error) error = parse_completion_request(body, context.parse_options, parsed);
  if (!error) apply_generation_defaults(body, context.generation_defaults, parsed.common);
  if (!error) error = read_structured_output(body, parsed.common);
  Generation generation;
  generation.meta = new_response_meta(ApiKind::kCompletion, answered_model_name(context, body));
  for (size_t i = 0; !error && i < parsed.prompt_texts.size(); ++i) {
    Prompt prompt;
    error = tokenize_text(context, parsed.prompt_texts[i], parsed.common.add_special_tokens.value_or(true), "prompt",
                          prompt.ids);
    if (parsed.echo) prompt.echo_text = parsed.prompt_texts[i];
    generation.prompts.push_back(std::move(prompt));
  }
  for (std::vector<TokenId>& ids : parsed.prompt_ids) {
    Prompt prompt;
    if (parsed.echo && context.tokenizer) prompt.echo_text = context.tokenizer->decode(ids, /*skip_special_tokens=*/false);
    prompt.ids = std::move(ids);
    generation.prompts.push_back(std::move(prompt));
  }
  if (error) {
    writer.respond(error_response(*error));
    return;
  }
  generation.common = std::move(parsed.common);
  if (parsed.num_logprobs) generation.logprobs = LogprobMode::kCompletion;
  generate(context, generation, writer);
}

void handle_chat_completions(const ServingContext& context, const HttpRequest& request, ResponseWriter& writer) {
  Json body;
  ChatRequest parsed;
  std::optional<ApiError> error = parse_json_body(request.body, body);
  if (!error) error = parse_chat_request(body, context.parse_options, parsed);
  if (!error) apply_generation_defaults(body, context.generation_defaults, parsed.common);
  if (!error) error = read_structured_output(body, parsed.common);
  if (!error) error = add_tool_choice_constraint(parsed.guided_json_schema, parsed.common);
  if (!error) error = check_tool_choice_servable(parsed, context.parse_options);
  if (!error && (!context.chat_template || !context.tokenizer))
    error = bad_request(context.chat_template_error, "messages", "not_supported");
  Generation generation;
  generation.meta = new_response_meta(ApiKind::kChat, answered_model_name(context, body));
  if (!error) {
    Expected<std::string> rendered = context.chat_template->render(parsed.template_inputs);
    Prompt prompt;
    if (!rendered.has_value()) error = api_error_from_status(rendered.status(), "messages");
    // The template wrote the special tokens itself: no post-processor BOS/EOS on top (as vLLM).
    else error = tokenize_text(context, *rendered, parsed.common.add_special_tokens.value_or(false), "messages",
                               prompt.ids);
    if (rendered.has_value()) generation.chat_prompt = std::move(*rendered);
    generation.prompts.push_back(std::move(prompt));
  }
  if (error) {
    writer.respond(error_response(*error));
    return;
  }
  generation.common = std::move(parsed.common);
  if (parsed.logprobs) generation.logprobs = LogprobMode::kChat;
  set_chat_output(context, parsed, generation);
  generate(context, generation, writer);
}

}  // namespace pagellm::server
