// pagellm generate: prompts in, tokens (and text when the model folder has a tokenizer) out, through
// the paged continuous-batching engine. With --prompts-file all prompts are submitted at once.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "engine/llm.h"

namespace pagellm::cli {

namespace {

struct GenerateArgs {
  std::string model, revision, prompt, prompt_ids, prompts_file, output = "text";
  int max_tokens = 16;
  float temperature = 0.0f;
  std::optional<uint64_t> seed;
  int logprobs = 0;
  bool ignore_eos = false;
  EngineConfig engine;
};

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      size_t used = 0;
      const long long value = std::stoll(item, &used);
      if (used != item.size() || value < INT32_MIN || value > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(value));
    } catch (const std::exception&) {
      throw CommandError(fmt::format("[generate] --prompt-ids: '{}' is not a token id", item));
    }
  }
  if (ids.empty()) throw CommandError("[generate] --prompt-ids is empty");
  return ids;
}

GenerateRequest base_request(const GenerateArgs& args) {
  GenerateRequest request;
  request.sampling.max_tokens = args.max_tokens;
  request.sampling.temperature = args.temperature;
  request.sampling.seed = args.seed;
  request.sampling.ignore_eos = args.ignore_eos;
  if (args.logprobs > 0) request.sampling.num_logprobs = args.logprobs;
  return request;
}

std::vector<TokenId> encode_or_throw(const Tokenizer* tokenizer, const std::string& text, const std::string& where) {
  if (!tokenizer) throw CommandError(fmt::format("[generate] {}: the model has no tokenizer.json, give token ids", where));
  return value_or_throw(tokenizer->encode(text, true));
}

// One line of --prompts-file: {"prompt": "..."} or {"prompt_ids": [...]}, plus optional overrides.
GenerateRequest request_from_line(const nlohmann::json& line, const GenerateArgs& args, const Tokenizer* tokenizer,
                                  const std::string& where) {
  GenerateRequest request = base_request(args);
  try {
    if (line.contains("prompt_ids")) request.prompt_token_ids = line.at("prompt_ids").get<std::vector<TokenId>>();
    else if (line.contains("prompt")) request.prompt_token_ids = encode_or_throw(tokenizer, line.at("prompt").get<std::string>(), where);
    else throw CommandError(fmt::format("[generate] {}: needs \"prompt\" or \"prompt_ids\"", where));
    SamplingParams& s = request.sampling;
    if (line.contains("max_tokens")) s.max_tokens = line.at("max_tokens").get<int>();
    if (line.contains("temperature")) s.temperature = line.at("temperature").get<float>();
    if (line.contains("top_p")) s.top_p = line.at("top_p").get<float>();
    if (line.contains("top_k")) s.top_k = line.at("top_k").get<int>();
    if (line.contains("seed")) s.seed = line.at("seed").get<uint64_t>();
    if (line.contains("ignore_eos")) s.ignore_eos = line.at("ignore_eos").get<bool>();
    if (line.contains("stop")) {
      const auto& stop = line.at("stop");
      if (stop.is_string()) request.stop_strings.push_back(stop.get<std::string>());
      else request.stop_strings = stop.get<std::vector<std::string>>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw CommandError(fmt::format("[generate] {}: {}", where, e.what()));
  }
  return request;
}

std::vector<GenerateRequest> read_prompts_file(const GenerateArgs& args, const Tokenizer* tokenizer) {
  std::ifstream in(args.prompts_file);
  if (!in) throw CommandError(fmt::format("[generate] cannot read --prompts-file {}", args.prompts_file));
  std::vector<GenerateRequest> requests;
  std::string text;
  for (int line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", args.prompts_file, line_no);
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, false);
    if (line.is_discarded() || !line.is_object()) throw CommandError(fmt::format("[generate] {}: not a JSON object", where));
    requests.push_back(request_from_line(line, args, tokenizer, where));
  }
  if (requests.empty()) throw CommandError(fmt::format("[generate] {} has no prompts", args.prompts_file));
  return requests;
}

nlohmann::ordered_json output_json(const CompletedRequest& out, bool has_tokenizer) {
  nlohmann::ordered_json item;
  item["prompt_ids"] = out.prompt_token_ids;
  item["token_ids"] = out.token_ids;
  if (has_tokenizer) item["text"] = out.text;
  item["finish_reason"] = finish_reason_name(out.finish_reason);
  if (!out.logprobs.empty()) {
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const SampledLogprobs& step : out.logprobs) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const TokenLogprob& lp : step.top) top.push_back({{"id", lp.token_id}, {"logprob", lp.logprob}});
      steps.push_back(top);
    }
    item["logprobs"] = steps;
  }
  return item;
}

std::string dump(const nlohmann::ordered_json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void run_generate(GenerateArgs args) {
  const int sources = !args.prompt.empty() + !args.prompt_ids.empty() + !args.prompts_file.empty();
  if (sources != 1) throw CommandError("[generate] give exactly one of --prompt TEXT, --prompt-ids 1,2,3 or --prompts-file F.jsonl");
  if (args.output != "text" && args.output != "json")
    throw CommandError(fmt::format("[generate] --output must be text or json, got '{}'", args.output));
  args.engine.model_dir = resolve_model_or_demo(args.model, args.revision);
  if (run_as_tensor_parallel_worker(args.engine)) return;  // --node-rank > 0: rank 0 prints the output
  auto llm = value_or_throw(LLM::load(args.engine));
  const Tokenizer* tokenizer = llm->engine().tokenizer();
  std::vector<GenerateRequest> requests;
  if (!args.prompts_file.empty()) {
    requests = read_prompts_file(args, tokenizer);
  } else {
    requests.push_back(base_request(args));
    requests.back().prompt_token_ids =
        args.prompt.empty() ? parse_id_list(args.prompt_ids) : encode_or_throw(tokenizer, args.prompt, "--prompt");
  }
  const auto started = std::chrono::steady_clock::now();
  std::vector<CompletedRequest> outputs = llm->generate(std::move(requests));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  size_t generated = 0;
  for (const CompletedRequest& out : outputs) {
    if (!out.error.is_ok()) throw CommandError(out.error);
    generated += out.token_ids.size();
  }
  if (!args.prompts_file.empty()) {
    for (const CompletedRequest& out : outputs) std::printf("%s\n", dump(output_json(out, tokenizer)).c_str());
  } else if (args.output == "json") {
    nlohmann::ordered_json root;
    root["outputs"] = nlohmann::ordered_json::array({output_json(outputs[0], tokenizer)});
    std::printf("%s\n", dump(root).c_str());
  } else if (tokenizer) {
    std::printf("%s\n", outputs[0].text.c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(outputs[0].token_ids, ",")).c_str());
  }
  std::fprintf(stderr, "pagellm: %zu request(s), %zu generated tokens in %.3f s (%.1f tok/s)\n", outputs.size(),
               generated, seconds, static_cast<double>(generated) / seconds);
  const SpecDecodeSummary spec = spec_decode_summary(llm->engine().metrics());
  if (spec.enabled)
    std::fprintf(stderr, "pagellm: speculative decoding: acceptance rate %.3f, mean acceptance length %.2f\n",
                 spec.acceptance_rate, spec.mean_acceptance_length);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate continuations of prompts (offline, batched)");
  auto args = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", args->model, "model folder or Hugging Face repo id in the local cache (default: demo model)");
  cmd->add_option("--revision", args->revision, "snapshot of a Hugging Face repo id");
  cmd->add_option("--prompt", args->prompt, "prompt text (needs tokenizer.json in the model folder)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt token ids, comma-separated");
  cmd->add_option("--prompts-file", args->prompts_file,
                  "JSON lines: {\"prompt\": ...} or {\"prompt_ids\": [...]} (+ max_tokens, temperature, top_p, top_k, "
                  "seed, stop, ignore_eos); prints JSON lines in input order");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed");
  cmd->add_option("--logprobs", args->logprobs, "top-K log-probabilities per generated token")->capture_default_str();
  cmd->add_option("--output", args->output, "text or json")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the end-of-sequence token");
  add_engine_options(*cmd, args->engine);
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace pagellm::cli
