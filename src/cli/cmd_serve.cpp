// pagellm serve: the OpenAI-compatible HTTP server (src/server) on top of one Engine.
//
// Start-up: SIGINT/SIGTERM handlers (they wake the main thread through a pipe), load the engine, the chat template, listen, print how to talk to the server. Shutdown: stop accepting,
// stop the engine (in-flight requests end as "abort" and their streams finish), wait for
// connections a bounded time, exit 0.
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "engine/engine.h"
#include "server/api_error.h"
#include "server/api_routes.h"
#include "server/access_log.h"
#include "server/http_server.h"
#include "server/stats_logger.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace pagellm::cli {

namespace {

struct ServeArgs {
  std::string model_positional;  // `pagellm serve MODEL`, as `vllm serve MODEL`
  std::string generation_config = "auto";
  bool disable_access_log = false, disable_log_stats = false;
  std::string model, revision, host = "127.0.0.1", api_key, chat_template;
  std::vector<std::string> served_model_names;  // the first is the main one (metrics, logs)
  int port = 8000;
  size_t max_body_bytes = 16 * 1024 * 1024;
  int max_connections = 8192;
  int max_connections_per_client = 4096;
  size_t max_inflight_body_bytes = 256u << 20;
  double header_timeout_s = 10.0;
  std::string tool_call_parser, reasoning_parser;  // vLLM's names; "" = none
  bool enable_auto_tool_choice = false;
  bool no_ui = false;  // no chat page at /
  EngineConfig engine;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CommandError(fmt::format("[serve] cannot read {}", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The special-token variables templates use (bos_token, eos_token, ...) from tokenizer_config.json.
nlohmann::ordered_json special_tokens_of(const std::filesystem::path& tokenizer_config) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  if (!std::filesystem::exists(tokenizer_config)) return tokens;
  auto config = nlohmann::ordered_json::parse(read_file(tokenizer_config.string()), nullptr, false);
  if (!config.is_object()) return tokens;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                          "mask_token", "additional_special_tokens"})
    if (config.contains(key) && !config[key].is_null()) tokens[key] = config[key];
  return tokens;
}

// Loads --chat-template FILE or the model's own; a model without one still serves completions.
void load_chat_template(const ServeArgs& args, const std::string& tokenizer_dir, server::ServingContext& context) {
  const std::filesystem::path config = std::filesystem::path(tokenizer_dir) / "tokenizer_config.json";
  Expected<ChatTemplate> loaded = !args.chat_template.empty()
                                      ? ChatTemplate::from_string(read_file(args.chat_template), special_tokens_of(config))
                                  : std::filesystem::exists(config)
                                      ? ChatTemplate::from_tokenizer_config(config.string())
                                      : Expected<ChatTemplate>(not_found("[serve] no tokenizer_config.json"));
  if (loaded.has_value()) {
    context.chat_template = std::move(loaded).value();
    return;
  }
  if (!args.chat_template.empty()) throw CommandError(loaded.status());
  context.chat_template_error = fmt::format(
      "[openai] this model has no usable chat template ({}); start the server with --chat-template FILE",
      loaded.status().message());
  std::fprintf(stderr, "pagellm serve: chat completions are off: %s\n", loaded.status().message().c_str());
}

void print_usage_hint(const server::ServingContext& context, const std::string& host, int port, bool has_api_key) {
  const std::string url = fmt::format("http://{}:{}", host.find(':') != std::string::npos ? "[" + host + "]" : host, port);
  std::fprintf(stderr, "pagellm serve: listening on %s (model '%s', max_model_len %d)\n", url.c_str(),
               context.served_model_name.c_str(), context.max_model_len);
  if (context.serve_chat_page) std::fprintf(stderr, "pagellm serve: chat page at %s/ (--no-ui turns it off)\n", url.c_str());
  std::fprintf(stderr,
               "pagellm serve: try\n  curl %s/v1/chat/completions -H 'Content-Type: application/json'%s \\\n"
               "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], "
               "\"max_tokens\": 32}'\n",
               url.c_str(), has_api_key ? " -H \"Authorization: Bearer $KEY\"" : "", context.served_model_name.c_str());
}

// SIGINT/SIGTERM may land on any thread (libraries start threads before main), so a handler,
// not a blocked mask, turns them into a byte on a pipe that the main thread waits on.
int g_signal_pipe[2] = {-1, -1};

void on_stop_signal(int signal_number) {
  const char byte = static_cast<char>(signal_number);
  (void)!::write(g_signal_pipe[1], &byte, 1);  // async-signal-safe
}

int wait_for_stop_signal() {
  char byte = 0;
  while (::read(g_signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  return byte;
}

void install_stop_handlers() {
  if (::pipe2(g_signal_pipe, O_CLOEXEC) != 0) throw CommandError("[serve] pipe() failed");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

// Binds (host, port) once and lets it go: a port already in use is reported before the model loads,
// which can take minutes. (A port taken during the load is still reported by listen() after it.)
void check_port_free(const std::string& host, int port) {
  if (port == 0) return;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) return;
  const int fd = ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  int reuse = 1;
  const bool bound = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse)) == 0 &&
                     ::bind(fd, found->ai_addr, found->ai_addrlen) == 0;
  const int error = errno;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (!bound && fd >= 0)
    throw CommandError(fmt::format("[serve] cannot listen on {}:{}: {} (is another server running there?)", host,
                                   port, std::strerror(error)));
}

void run_serve(ServeArgs& args) {
  if (!args.model_positional.empty()) {
    if (!args.model.empty() && args.model != args.model_positional)
      throw CommandError(fmt::format("[serve] two models given: '{}' and --model '{}'", args.model_positional, args.model));
    args.model = args.model_positional;
  }
  const bool is_demo = args.model.empty();
  const std::string model_dir = resolve_model_or_demo(args.model, args.revision);
  args.engine.model_dir = model_dir;
  // --node-rank > 0: no server here, and Ctrl-C / SIGTERM end the worker at once (rank 0 sees it go).
  if (run_as_tensor_parallel_worker(args.engine)) return;
  install_stop_handlers();
  check_port_free(args.host, args.port);

  if (is_demo)
    std::fprintf(stderr, "pagellm serve: WARNING: serving the demo model, whose weights are RANDOM: it answers "
                         "gibberish. Pass --model DIR|repo-id for a real model.\n");
  std::unique_ptr<Engine> engine = value_or_throw(Engine::load(args.engine));
  engine->start();

  auto context = std::make_shared<server::ServingContext>();
  context->engine = engine.get();
  context->tokenizer = engine->shared_tokenizer();
  context->served_model_name = !args.served_model_names.empty() ? args.served_model_names.front()
                               : is_demo                       ? std::string("pagellm-demo")
                                                               : args.model;
  context->model_dir = model_dir;
  context->tokenizer_dir = args.engine.tokenizer_dir.empty() ? model_dir : args.engine.tokenizer_dir;
  context->api_key = args.api_key;
  context->max_model_len = engine->config().max_model_len;
  context->generation_defaults = value_or_throw(server::load_generation_defaults(args.generation_config, model_dir));
  if (!context->generation_defaults.empty())
    std::fprintf(stderr, "pagellm serve: sampling defaults from generation_config.json (requests override them): %s\n",
                 context->generation_defaults.describe().c_str());
  context->parse_options.served_model_name = context->served_model_name;
  if (args.served_model_names.size() > 1)
    context->parse_options.model_aliases.assign(args.served_model_names.begin() + 1, args.served_model_names.end());
  context->parse_options.vocab_size = engine->model_config().vocab_size;
  context->chat_template_error = "[openai] this model has no tokenizer, so no chat template";
  if (context->tokenizer) load_chat_template(args, context->tokenizer_dir, *context);
  context->reasoning_parser = args.reasoning_parser;
  context->tool_call_parser = args.tool_call_parser;
  context->parse_options.auto_tool_choice = args.enable_auto_tool_choice;
  context->serve_chat_page = !args.no_ui;

  server::HttpServerOptions options;
  options.host = args.host;
  options.port = args.port;
  options.max_connections = args.max_connections;
  options.max_connections_per_client = args.max_connections_per_client;
  options.max_inflight_body_bytes = args.max_inflight_body_bytes;
  options.limits.max_body_bytes = args.max_body_bytes;
  options.limits.head_timeout_ms = static_cast<int>(args.header_timeout_s * 1000.0);
  server::HttpService service = server::make_api_handler(context);
  if (!args.disable_access_log) service.handle = server::with_access_log(std::move(service.handle));
  server::HttpServer http(options, std::move(service),
                          [](int status, const std::string& message) { return server::error_response(status, message); });
  throw_if_error(http.listen());
  http.start();
  print_usage_hint(*context, args.host, http.port(), !args.api_key.empty());
  std::optional<server::StatsLogger> stats;
  if (!args.disable_log_stats) stats.emplace(*engine, std::chrono::seconds(10));

  const int signal_number = wait_for_stop_signal();
  std::fprintf(stderr, "pagellm serve: %s received, shutting down\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  stats.reset();
  http.stop();    // no new connections; kept-alive ones close after their current exchange
  engine->stop(); // in-flight requests end with finish_reason "abort": their handlers answer and return
  if (!http.wait_idle(std::chrono::seconds(5))) {
    http.shutdown_connections();
    if (!http.wait_idle(std::chrono::seconds(2))) {
      std::fprintf(stderr, "pagellm serve: %d connections did not close in time; exiting anyway\n", http.num_connections());
      std::fflush(nullptr);
      ::_exit(0);  // threads still hold the engine: skip destructors
    }
  }
  std::fprintf(stderr, "pagellm serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)");
  auto args = std::make_shared<ServeArgs>();
  cmd->add_option("model", args->model_positional, "model folder or Hugging Face repo id (same as --model)");
  cmd->add_option("--model", args->model, "model folder or Hugging Face repo id in the local cache (default: demo model)");
  cmd->add_option("--revision", args->revision, "snapshot of a Hugging Face repo id");
  cmd->add_option("--served-model-name", args->served_model_names,
                  "the names clients send as \"model\" (several: any of them; the first names metrics and logs; "
                  "default: --model as given, or pagellm-demo)");
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port to listen on (0 = any free port)")->capture_default_str();
  cmd->add_option("--api-key", args->api_key, "require 'Authorization: Bearer KEY' on /v1 routes");
  cmd->add_flag("--no-ui", args->no_ui, "no chat page at / (then / is a 404 like any unknown path)");
  cmd->add_option("--max-waiting", args->engine.max_waiting, "requests in flight at most; more get 429")
      ->capture_default_str();
  cmd->add_option("--chat-template", args->chat_template, "Jinja chat template file (default: tokenizer_config.json's)");
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "request body size limit (larger: 413)")->capture_default_str();
  cmd->add_option("--max-connections", args->max_connections, "open connections at most (more: 503)")->capture_default_str();
  cmd->add_option("--max-connections-per-client", args->max_connections_per_client,
                  "open connections from one client address at most (more: 503; 0 = no cap)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-inflight-body-bytes", args->max_inflight_body_bytes,
                  "request bodies being read or handled hold this many bytes together at most (more: 503)")
      ->capture_default_str();
  cmd->add_option("--header-timeout-s", args->header_timeout_s,
                  "a request head must arrive within this time from its first byte (slow clients: 408)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--enable-auto-tool-choice", args->enable_auto_tool_choice,
                "tool_choice \"auto\" (the default with tools): read the model's tool calls with --tool-call-parser");
  cmd->add_option("--tool-call-parser", args->tool_call_parser, "how the model writes tool calls")
      ->check(CLI::IsMember(server::tool_parser_names()));
  cmd->add_option("--reasoning-parser", args->reasoning_parser,
                  "put the model's thinking in reasoning_content")
      ->check(CLI::IsMember(server::reasoning_parser_names()));
  cmd->add_option("--generation-config", args->generation_config,
                  "sampling defaults: auto (the model's generation_config.json), vllm (none), or a folder holding one")
      ->capture_default_str();
  cmd->add_flag("--disable-access-log,--disable-uvicorn-access-log", args->disable_access_log,
                "no log line per answered request");
  cmd->add_flag("--disable-log-stats", args->disable_log_stats,
                "no periodic stats line (throughput, running/waiting requests, KV cache usage)");
  add_engine_options(*cmd, args->engine);
  cmd->callback([args] {
    if (args->enable_auto_tool_choice && args->tool_call_parser.empty())
      throw CommandError("[serve] --enable-auto-tool-choice needs --tool-call-parser (one of hermes, qwen3_coder, "
                         "llama3_json, mistral, openai)");
    run_serve(*args);
  });
}

}  // namespace pagellm::cli
