// `pagellm bench serve`: a load generator with the metrics of `vllm bench serve` for any
// OpenAI-compatible server; `pagellm bench fake-server`: a scripted server to measure it against.
#include "cli/cmd_bench.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "bench/bench_tokenizer.h"
#include "bench/concurrency_sweep.h"
#include "bench/dataset.h"
#include "bench/fake_openai_server.h"
#include "bench/metrics.h"
#include "bench/multi_turn.h"
#include "bench/report.h"
#include "bench/serve_runner.h"
#include "cli/commands.h"

namespace pagellm::cli {

namespace {

using namespace pagellm::bench;

struct ServeArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string tokenizer_dir;
  std::string api_key;
  std::string dataset = "random";
  std::string dataset_path;
  int num_prompts = 1000;
  bool num_prompts_given = false;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int random_vocab_size = 0;
  int sharegpt_output_len = 0;
  int multi_turn_turns = 4;
  int multi_turn_system_len = 256;
  std::vector<int> mixed_input_lens = {8000, 3000, 512, 128, 64};
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  bool ignore_eos = false;
  std::string extra_body;
  uint64_t seed = 0;
  std::vector<std::string> goodput;
  std::string percentiles = "99";
  std::string result_json;
  std::string sweep_concurrency;
  bool no_progress = false;
};

double parse_request_rate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  double rate = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(rate > 0.0)) {
    throw CommandError("[bench] --request-rate must be a positive number or inf, got '" + text + "'");
  }
  return rate;
}

// Loaded only when asked for: without --tokenizer every path works on approximations.
std::unique_ptr<BenchTokenizer> load_tokenizer(const ServeArgs& args) {
  if (args.tokenizer_dir.empty()) return nullptr;
  return value_or_throw(load_bench_tokenizer(args.tokenizer_dir));
}

Expected<Dataset> make_dataset(const ServeArgs& args, Endpoint endpoint, const BenchTokenizer* tokenizer,
                               int num_prompts) {
  if (args.dataset == "random") {
    RandomDatasetOptions options;
    options.num_prompts = num_prompts;
    options.input_len = args.random_input_len;
    options.output_len = args.random_output_len;
    options.range_ratio = args.random_range_ratio;
    options.seed = args.seed;
    options.vocab_size = args.random_vocab_size;
    options.as_text = endpoint == Endpoint::kChatCompletions;
    return make_random_dataset(options, tokenizer);
  }
  if (args.dataset == "mixed") {
    MixedDatasetOptions options;
    options.random.num_prompts = num_prompts;
    options.random.output_len = args.random_output_len;
    options.random.range_ratio = args.random_range_ratio;
    options.random.seed = args.seed;
    options.random.vocab_size = args.random_vocab_size;
    options.random.as_text = endpoint == Endpoint::kChatCompletions;
    options.input_lens = args.mixed_input_lens;
    return make_mixed_dataset(options, tokenizer);
  }
  if (args.dataset == "sharegpt") {
    ShareGptOptions options;
    options.path = args.dataset_path;
    options.num_prompts = num_prompts;
    options.seed = args.seed;
    if (args.sharegpt_output_len > 0) options.fixed_output_len = args.sharegpt_output_len;
    return load_sharegpt_dataset(options, tokenizer);
  }
  return invalid_argument("[bench] --dataset must be random, mixed, sharegpt or multi-turn, got '{}'", args.dataset);
}

ServeConfig make_serve_config(const ServeArgs& args, Endpoint endpoint) {
  ServeConfig config;
  config.base_url = value_or_throw(parse_base_url(args.base_url));
  config.request.model = args.model;
  config.request.endpoint = endpoint;
  config.request.ignore_eos = args.ignore_eos;
  if (!args.extra_body.empty()) {
    config.request.extra_body = nlohmann::json::parse(args.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!config.request.extra_body.is_object())
      throw CommandError("[bench] --extra-body must be a JSON object, e.g. '{\"response_format\": {\"type\": \"json_object\"}}'");
  }
  config.request_rate = parse_request_rate(args.request_rate);
  config.burstiness = args.burstiness;
  config.max_concurrency = args.max_concurrency;
  config.seed = args.seed;
  if (!args.api_key.empty()) config.extra_headers = "Authorization: Bearer " + args.api_key + "\r\n";
  config.show_progress = !args.no_progress;
  return config;
}

RunDescription describe(const ServeArgs& args, const ServeConfig& config, std::vector<double> percentiles) {
  RunDescription run;
  run.base_url = args.base_url;
  run.endpoint = endpoint_path(config.request.endpoint);
  run.model = args.model;
  run.dataset_name = args.dataset;
  run.num_prompts = args.num_prompts;
  run.request_rate = config.request_rate;
  run.burstiness = config.burstiness;
  run.max_concurrency = config.max_concurrency;
  run.percentiles = std::move(percentiles);
  return run;
}

void write_json_file(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw CommandError("[bench] cannot write '" + path + "'");
  out << doc.dump(2) << "\n";
}

std::string client_line(const RunResult& result) {
  double per_cpu_s = result.client_cpu_s > 0 ? result.num_sse_events / result.client_cpu_s : 0.0;
  return fmt::format("Client: {} SSE events, {:.2f} s of client CPU ({:.0f} events per CPU-second)\n",
                     result.num_sse_events, result.client_cpu_s, per_cpu_s);
}

std::unique_ptr<MultiTurnConversations> make_conversations(const ServeArgs& args, Endpoint endpoint,
                                                           const BenchTokenizer* tokenizer) {
  MultiTurnOptions options;
  options.num_conversations = args.num_prompts;
  options.turns = args.multi_turn_turns;
  options.system_len = args.multi_turn_system_len;
  options.input_len = args.random_input_len;
  options.output_len = args.random_output_len;
  options.range_ratio = args.random_range_ratio;
  options.seed = args.seed;
  options.vocab_size = args.random_vocab_size;
  options.endpoint = endpoint;
  return value_or_throw(MultiTurnConversations::make(options, tokenizer));
}

// One load: the dataset's requests, or the conversations' first turns with their follow-ups.
RunResult run_dataset(const ServeArgs& args, const ServeConfig& config, const BenchTokenizer* tokenizer,
                      std::vector<std::string>* notes) {
  if (args.dataset == "multi-turn") {
    auto conversations = make_conversations(args, config.request.endpoint, tokenizer);
    RunResult result =
        value_or_throw(run_serve_benchmark(config, conversations->first_turns(), conversations.get()));
    *notes = conversations->notes();
    return result;
  }
  Dataset dataset = value_or_throw(make_dataset(args, config.request.endpoint, tokenizer, args.num_prompts));
  *notes = dataset.notes;
  return value_or_throw(run_serve_benchmark(config, dataset.requests));
}

void run_single(const ServeArgs& args, const ServeConfig& config, RunDescription run,
                const BenchTokenizer* tokenizer, const GoodputSlo& slo) {
  RunResult result = run_dataset(args, config, tokenizer, &run.notes);
  BenchMetrics metrics = compute_metrics(result.records, result.duration_s, result.peak_concurrency, slo,
                                         run.percentiles);
  std::fputs(format_result_table(metrics, run).c_str(), stdout);
  std::fputs(client_line(result).c_str(), stdout);
  if (!args.result_json.empty()) {
    nlohmann::json doc = make_result_json(metrics, run, result, /*with_details=*/true);
    doc["client_sse_events"] = result.num_sse_events;
    doc["client_cpu_s"] = result.client_cpu_s;
    write_json_file(args.result_json, doc);
  }
}

void run_sweep(const ServeArgs& args, const ServeConfig& config, const RunDescription& run,
               const BenchTokenizer* tokenizer, const GoodputSlo& slo) {
  std::vector<int> levels = value_or_throw(parse_concurrency_levels(args.sweep_concurrency));
  std::optional<int> num_prompts;
  if (args.num_prompts_given) num_prompts = args.num_prompts;
  auto dataset_for = [&](int count) { return make_dataset(args, config.request.endpoint, tokenizer, count); };
  auto print_level = [](const SweepLevelResult& level, const RunDescription& level_run) {
    std::fputs(format_result_table(level.metrics, level_run).c_str(), stdout);
    std::fflush(stdout);
  };
  std::vector<SweepLevelResult> results =
      value_or_throw(run_concurrency_sweep(config, levels, num_prompts, dataset_for, run, slo, print_level));
  std::string json_path = args.result_json.empty() ? "sweep_results.json" : args.result_json;
  throw_if_error(write_sweep_outputs(json_path, results, run));
  std::printf("Wrote %s and %s\n", json_path.c_str(), sweep_chart_path(json_path).c_str());
}

// Fails before the run, not after it, when the result file cannot be written.
void prepare_output_path(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream probe(path, std::ios::app);
  if (!probe) throw CommandError("[bench] cannot write '" + path + "'");
}

void run_serve(const ServeArgs& args) {
  if (args.model.empty()) throw CommandError("[bench] --model is required");
  if (!args.sweep_concurrency.empty() && args.dataset == "multi-turn") {
    throw CommandError("[bench] --sweep-concurrency does not support --dataset multi-turn yet");
  }
  if (!args.result_json.empty()) prepare_output_path(args.result_json);
  Endpoint endpoint = value_or_throw(parse_endpoint(args.endpoint));
  ServeConfig config = make_serve_config(args, endpoint);
  GoodputSlo slo = value_or_throw(parse_goodput(args.goodput));
  RunDescription run = describe(args, config, value_or_throw(parse_percentiles(args.percentiles)));
  std::unique_ptr<BenchTokenizer> tokenizer = load_tokenizer(args);
  if (args.sweep_concurrency.empty()) {
    run_single(args, config, run, tokenizer.get(), slo);
  } else {
    run_sweep(args, config, run, tokenizer.get(), slo);
  }
}

void add_bench_serve_command(CLI::App& bench) {
  auto args = std::make_shared<ServeArgs>();
  if (const char* key = std::getenv("OPENAI_API_KEY")) args->api_key = key;
  auto* cmd = bench.add_subcommand("serve", "Load-test an OpenAI-compatible server (vLLM bench serve metrics)");
  cmd->add_option("--base-url", args->base_url, "http://HOST:PORT (localhost or IPv4 literal)")->capture_default_str();
  cmd->add_option("--endpoint", args->endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  cmd->add_option("--model", args->model, "model name sent in each request")->required();
  cmd->add_option("--tokenizer", args->tokenizer_dir, "model directory with tokenizer.json (exact token lengths)");
  cmd->add_option("--api-key", args->api_key, "sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)");
  cmd->add_option("--dataset", args->dataset,
                  "random, mixed (prompt lengths of --mixed-input-lens alike often), sharegpt or multi-turn "
                  "(conversations resending their history: prefix caching)")
      ->capture_default_str();
  cmd->add_option("--dataset-path", args->dataset_path, "ShareGPT JSON file");
  auto* num_prompts =
      cmd->add_option("--num-prompts", args->num_prompts, "requests to send (multi-turn: conversations)")
          ->capture_default_str();
  cmd->add_option("--random-input-len", args->random_input_len, "prompt tokens (random; multi-turn: per user message)")->capture_default_str();
  cmd->add_option("--random-output-len", args->random_output_len, "max_tokens (random)")->capture_default_str();
  cmd->add_option("--random-range-ratio", args->random_range_ratio, "lengths uniform in len*(1±r)")->capture_default_str();
  cmd->add_option("--random-vocab-size", args->random_vocab_size,
                  "random ids are drawn below this (default: the tokenizer's, else 1000)");
  cmd->add_option("--multi-turn-turns", args->multi_turn_turns,
                  "turns per conversation (each user message: --random-input-len, answer: --random-output-len)")
      ->capture_default_str();
  cmd->add_option("--multi-turn-system-len", args->multi_turn_system_len,
                  "tokens of the system prompt every conversation shares")
      ->capture_default_str();
  cmd->add_option("--mixed-input-lens", args->mixed_input_lens, "prompt-length classes of --dataset mixed")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sharegpt-output-len", args->sharegpt_output_len, "fixed max_tokens instead of the 2nd turn's length");
  cmd->add_option("--request-rate", args->request_rate, "requests/s (Poisson/gamma arrivals) or inf")->capture_default_str();
  cmd->add_option("--burstiness", args->burstiness, "gamma shape of arrival gaps (1 = Poisson)")->capture_default_str();
  cmd->add_option("--max-concurrency", args->max_concurrency, "most requests in flight (0 = no cap)")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "send ignore_eos: true (fixed output lengths)");
  cmd->add_option("--extra-body", args->extra_body,
                  "JSON object merged into every request body (e.g. a response_format to measure structured outputs)");
  cmd->add_option("--seed", args->seed, "seed of dataset and arrivals")->capture_default_str();
  cmd->add_option("--goodput", args->goodput, "SLOs, e.g. ttft:200 tpot:50 e2el:5000 (ms)")->expected(1, 3);
  cmd->add_option("--percentiles", args->percentiles, "e.g. 50,90,99")->capture_default_str();
  cmd->add_option("--result-json", args->result_json, "write vLLM-style result JSON here");
  cmd->add_option("--sweep-concurrency", args->sweep_concurrency,
                  "e.g. 1,16,64,128: one run per level (num prompts = --num-prompts or 4 x level), JSON + SVG");
  cmd->add_flag("--no-progress", args->no_progress, "no live progress line on stderr");
  cmd->callback([args, num_prompts] {
    args->num_prompts_given = num_prompts->count() > 0;
    run_serve(*args);
  });
}

struct FakeServerArgs {
  uint16_t port = 8000;
  double duration_s = 0.0;
  FakeServerScript script;
};

void add_bench_fake_server_command(CLI::App& bench) {
  auto args = std::make_shared<FakeServerArgs>();
  auto* cmd = bench.add_subcommand("fake-server", "Serve scripted OpenAI streams on 127.0.0.1 (to test bench serve)");
  cmd->add_option("--port", args->port, "0 = any free port")->capture_default_str();
  cmd->add_option("--first-chunk-delay-ms", args->script.first_chunk_delay_ms)->capture_default_str();
  cmd->add_option("--token-interval-ms", args->script.token_interval_ms, "0 = all tokens at once")->capture_default_str();
  cmd->add_option("--num-tokens", args->script.num_tokens, "tokens per response (0 = the request's max_tokens)")
      ->capture_default_str();
  cmd->add_option("--duration-s", args->duration_s, "exit after this long (0 = run until killed)")->capture_default_str();
  cmd->callback([args] {
    auto server = value_or_throw(FakeOpenAiServer::start(args->script, args->port));
    std::printf("fake OpenAI server listening on %s\n", server->base_url().c_str());
    std::fflush(stdout);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(args->duration_s);
    while (args->duration_s <= 0.0 || std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("served %lld requests, peak %d in flight\n", static_cast<long long>(server->num_requests()),
                server->peak_requests_in_flight());
  });
}

}  // namespace

CLI::App* bench_app(CLI::App& app) {
  try {
    return app.get_subcommand("bench");
  } catch (const CLI::OptionNotFound&) {
    auto* bench = app.add_subcommand("bench", "Benchmarks: serve (load generator), throughput, latency");
    bench->require_subcommand(1);
    return bench;
  }
}

void add_bench_commands(CLI::App& app) {
  CLI::App* bench = bench_app(app);
  add_bench_serve_command(*bench);
  add_bench_fake_server_command(*bench);
}

}  // namespace pagellm::cli
