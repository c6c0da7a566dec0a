// `pagellm bench throughput` and `pagellm bench latency`: the engine in-process, no HTTP.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cmd_bench.h"
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "engine/llm.h"

namespace pagellm::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct OfflineArgs {
  std::string model, output = "text";
  int num_prompts = 32, input_len = 128, output_len = 64, batch_size = 1;
  int prompt_period = 0;  // > 0: each prompt repeats its first prompt_period random tokens (n-gram drafts find matches)
  uint64_t seed = 0;
  float temperature = 0.0f;
  EngineConfig engine;
};

std::vector<GenerateRequest> random_requests(const OfflineArgs& args, int count, int64_t vocab) {
  std::mt19937_64 rng(args.seed);
  std::vector<GenerateRequest> requests(static_cast<size_t>(count));
  for (GenerateRequest& r : requests) {
    r.prompt_token_ids.resize(static_cast<size_t>(args.input_len));
    for (TokenId& t : r.prompt_token_ids) t = static_cast<TokenId>(rng() % static_cast<uint64_t>(vocab));
    for (size_t i = static_cast<size_t>(std::max(args.prompt_period, 0)); args.prompt_period > 0 && i < r.prompt_token_ids.size(); ++i)
      r.prompt_token_ids[i] = r.prompt_token_ids[i - static_cast<size_t>(args.prompt_period)];
    r.sampling.max_tokens = args.output_len;
    r.sampling.temperature = args.temperature;
    r.sampling.ignore_eos = true;
  }
  return requests;
}

double percentile(std::vector<float> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = q / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

double mean(const std::vector<float>& values) {
  double sum = 0.0;
  for (float v : values) sum += v;
  return values.empty() ? 0.0 : sum / static_cast<double>(values.size());
}

// nullptr when this process ran as a worker rank (--node-rank > 0): rank 0 measures and reports.
std::unique_ptr<LLM> load_llm(OfflineArgs& args) {
  args.engine.model_dir = resolve_model_or_demo(args.model, "");
  if (run_as_tensor_parallel_worker(args.engine)) return nullptr;
  return value_or_throw(LLM::load(args.engine));
}

void run_throughput(OfflineArgs args) {
  auto llm = load_llm(args);
  if (!llm) return;
  auto requests = random_requests(args, args.num_prompts, llm->engine().model_config().vocab_size);
  llm->engine().clear_step_times();
  const auto started = Clock::now();
  auto outputs = llm->generate(std::move(requests));
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  int completed = 0;
  int64_t output_tokens = 0;
  for (const CompletedRequest& out : outputs) {
    if (!out.error.is_ok()) throw CommandError(out.error);
    completed += out.finish_reason != FinishReason::kAbort;
    output_tokens += static_cast<int64_t>(out.token_ids.size());
  }
  const EngineMetrics m = llm->engine().metrics();
  const std::vector<float> steps = llm->engine().step_times_s();
  const int64_t prompt_tokens = static_cast<int64_t>(args.num_prompts) * args.input_len;
  const double hit_rate = m.prefix_cache_query_tokens ? static_cast<double>(m.prefix_cache_hit_tokens) / static_cast<double>(m.prefix_cache_query_tokens) : 0.0;
  nlohmann::ordered_json j;
  j["requests_completed"] = completed;
  j["duration_s"] = seconds;
  j["requests_per_s"] = completed / seconds;
  j["prompt_tokens"] = prompt_tokens;
  j["output_tokens"] = output_tokens;
  j["prompt_tok_s"] = static_cast<double>(prompt_tokens) / seconds;
  j["output_tok_s"] = static_cast<double>(output_tokens) / seconds;
  j["steps"] = steps.size();
  j["mean_step_ms"] = mean(steps) * 1e3;
  j["p99_step_ms"] = percentile(steps, 99) * 1e3;
  j["preemptions"] = m.preemptions;
  j["prefix_cache_hit_rate"] = hit_rate;
  j["max_num_seqs"] = args.engine.max_num_seqs;
  const SpecDecodeSummary spec = spec_decode_summary(m);
  if (spec.enabled) {
    j["spec_decode_acceptance_rate"] = spec.acceptance_rate;
    j["spec_decode_mean_acceptance_length"] = spec.mean_acceptance_length;
  }
  if (args.output == "json") {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("requests %d in %.2f s: %.2f req/s, prompt %.1f tok/s, output %.1f tok/s\n", completed, seconds,
              completed / seconds, static_cast<double>(prompt_tokens) / seconds, static_cast<double>(output_tokens) / seconds);
  std::printf("steps %zu: mean %.2f ms, p99 %.2f ms; preemptions %llu; prefix-cache hit rate %.3f\n", steps.size(),
              mean(steps) * 1e3, percentile(steps, 99) * 1e3, static_cast<unsigned long long>(m.preemptions), hit_rate);
  if (spec.enabled)
    std::printf("speculative decoding: acceptance rate %.3f, mean acceptance length %.2f\n", spec.acceptance_rate,
                spec.mean_acceptance_length);
}

void run_latency(OfflineArgs args) {
  args.engine.max_num_seqs = std::max(args.engine.max_num_seqs, args.batch_size);
  args.engine.max_num_batched_tokens = std::max(args.engine.max_num_batched_tokens, args.batch_size * args.input_len);
  args.engine.enable_prefix_caching = false;
  auto llm = load_llm(args);
  if (!llm) return;
  const int64_t vocab = llm->engine().model_config().vocab_size;
  // One warm-up round, then the measured one.
  for (int round = 0; round < 2; ++round) {
    args.seed += 1;
    auto requests = random_requests(args, args.batch_size, vocab);
    llm->engine().clear_step_times();
    const auto started = Clock::now();
    llm->generate(std::move(requests));
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    if (round == 0) continue;
    std::vector<float> steps = llm->engine().step_times_s();
    if (steps.empty()) throw CommandError("[bench] no steps ran");
    const double prefill_ms = steps.front() * 1e3;
    std::vector<float> decode(steps.begin() + 1, steps.end());
    nlohmann::ordered_json j;
    j["batch_size"] = args.batch_size;
    j["input_len"] = args.input_len;
    j["output_len"] = args.output_len;
    j["prefill_ms"] = prefill_ms;
    j["prefill_tok_s"] = args.batch_size * args.input_len / (prefill_ms / 1e3);
    j["decode_step_mean_ms"] = mean(decode) * 1e3;
    j["decode_step_p50_ms"] = percentile(decode, 50) * 1e3;
    j["decode_step_p99_ms"] = percentile(decode, 99) * 1e3;
    // Decode tokens over decode time: a speculative step yields several tokens per request.
    const double decode_s = std::accumulate(decode.begin(), decode.end(), 0.0);
    const double decode_tokens = static_cast<double>(args.batch_size) * std::max(args.output_len - 1, 0);
    j["decode_tok_s"] = decode_s > 0 ? decode_tokens / decode_s : 0.0;
    j["tpot_ms"] = args.output_len > 1 ? decode_s * 1e3 / (args.output_len - 1) : 0.0;
    const SpecDecodeSummary spec = spec_decode_summary(llm->engine().metrics());
    if (spec.enabled) {
      j["spec_decode_acceptance_rate"] = spec.acceptance_rate;
      j["spec_decode_mean_acceptance_length"] = spec.mean_acceptance_length;
    }
    j["total_s"] = seconds;
    if (args.output == "json") {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("batch %d, input %d, output %d: prefill %.2f ms (%.0f tok/s); decode step mean %.2f ms, p50 %.2f, "
                  "p99 %.2f (%.1f tok/s, TPOT %.2f ms)\n", args.batch_size, args.input_len, args.output_len, prefill_ms,
                  j["prefill_tok_s"].get<double>(), mean(decode) * 1e3, percentile(decode, 50) * 1e3,
                  percentile(decode, 99) * 1e3, j["decode_tok_s"].get<double>(), j["tpot_ms"].get<double>());
      if (spec.enabled)
        std::printf("speculative decoding: acceptance rate %.3f, mean acceptance length %.2f\n", spec.acceptance_rate,
                    spec.mean_acceptance_length);
    }
  }
}

void add_common(CLI::App* cmd, OfflineArgs& args) {
  cmd->add_option("--model", args.model, "model folder (default: demo model)");
  cmd->add_option("--input-len", args.input_len, "prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", args.output_len, "generated tokens per request (ignore_eos)")->capture_default_str();
  cmd->add_option("--seed", args.seed, "random prompts' seed")->capture_default_str();
  cmd->add_option("--temperature", args.temperature, "sampling temperature")->capture_default_str();
  cmd->add_option("--prompt-period", args.prompt_period,
                  "> 0: prompts repeat a random motif of this many tokens (repetitive text for n-gram speculation)")
      ->capture_default_str();
  cmd->add_option("--output", args.output, "text or json")->capture_default_str();
  add_engine_options(*cmd, args.engine);
}

}  // namespace

void add_bench_offline_commands(CLI::App& app) {
  CLI::App* bench = bench_app(app);
  auto throughput = std::make_shared<OfflineArgs>();
  auto* t = bench->add_subcommand("throughput", "Offline throughput: random prompts through the engine in-process");
  add_common(t, *throughput);
  t->add_option("--num-prompts", throughput->num_prompts, "requests, all submitted at once")->capture_default_str();
  t->callback([throughput] { run_throughput(*throughput); });

  auto latency = std::make_shared<OfflineArgs>();
  auto* l = bench->add_subcommand("latency", "Per-step prefill and decode timings of one batch, in-process");
  add_common(l, *latency);
  l->add_option("--batch-size", latency->batch_size, "requests in the batch")->capture_default_str();
  l->callback([latency] { run_latency(*latency); });
}

}  // namespace pagellm::cli
