// pagellm generate: prompts in, tokens (and text when the model folder has a tokenizer) out.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_arg.h"
#include "model/model.h"
#include "runner/sequence_generator.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::cli {

namespace {

struct GenerateArgs {
  std::string model, revision, prompt, prompt_ids, output = "text", device = "cpu";
  int max_tokens = 16;
  float temperature = 0.0f;
  uint64_t seed = 0;
  int logprobs = 0;
  bool ignore_eos = false;
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

std::shared_ptr<const Tokenizer> load_tokenizer_if_present(const std::string& model_dir) {
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json")) return nullptr;
  return value_or_throw(Tokenizer::from_dir(model_dir));
}

nlohmann::ordered_json output_json(const std::vector<int32_t>& prompt_ids, const SequenceOutput& out,
                                   const Tokenizer* tokenizer) {
  nlohmann::ordered_json item;
  item["prompt_ids"] = prompt_ids;
  item["token_ids"] = out.token_ids;
  if (tokenizer) item["text"] = tokenizer->decode(out.token_ids, true);
  item["finish_reason"] = finish_reason_name(out.finish_reason);
  if (!out.logprobs.empty()) {
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const auto& step : out.logprobs) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const TokenLogprob& lp : step.top) top.push_back({{"id", lp.token_id}, {"logprob", lp.logprob}});
      steps.push_back(top);
    }
    item["logprobs"] = steps;
  }
  return item;
}

void run_generate(const GenerateArgs& args) {
  if (args.prompt.empty() == args.prompt_ids.empty())
    throw CommandError("[generate] give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
  if (args.output != "text" && args.output != "json")
    throw CommandError(fmt::format("[generate] --output must be text or json, got '{}'", args.output));
  const std::string model_dir = resolve_model_or_demo(args.model, args.revision);
  auto tokenizer = load_tokenizer_if_present(model_dir);
  std::vector<int32_t> prompt_ids;
  if (!args.prompt_ids.empty()) {
    prompt_ids = parse_id_list(args.prompt_ids);
  } else {
    if (!tokenizer)
      throw CommandError(fmt::format("[generate] {} has no tokenizer.json: use --prompt-ids", model_dir));
    prompt_ids = value_or_throw(tokenizer->encode(args.prompt, true));
  }
  auto backend = value_or_throw(make_backend(args.device));
  auto model = value_or_throw(load_model(model_dir, *backend));
  SequenceOptions options;
  options.sampling.max_tokens = args.max_tokens;
  options.sampling.temperature = args.temperature;
  options.sampling.seed = args.seed;
  if (args.logprobs > 0) options.sampling.num_logprobs = args.logprobs;
  options.sampling.ignore_eos = args.ignore_eos;
  for (int64_t id : model->config().eos_token_ids) options.sampling.eos_token_ids.push_back(static_cast<int32_t>(id));
  const auto started = std::chrono::steady_clock::now();
  SequenceOutput out = value_or_throw(generate_sequence(*model, *backend, prompt_ids, options));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (args.output == "json") {
    nlohmann::ordered_json root;
    root["outputs"] = nlohmann::ordered_json::array({output_json(prompt_ids, out, tokenizer.get())});
    std::printf("%s\n", root.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (tokenizer) {
    std::printf("%s\n", tokenizer->decode(out.token_ids, true).c_str());
  } else {
    std::printf("%s\n", fmt::format("{}", fmt::join(out.token_ids, ",")).c_str());
  }
  std::fprintf(stderr, "pagellm: %zu prompt + %zu generated tokens in %.3f s (%.1f tok/s), finish_reason %s\n",
               prompt_ids.size(), out.token_ids.size(), seconds,
               static_cast<double>(out.token_ids.size()) / seconds, std::string(finish_reason_name(out.finish_reason)).c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  auto args = std::make_shared<GenerateArgs>();
  cmd->add_option("--model", args->model, "model folder or Hugging Face repo id in the local cache (default: demo model)");
  cmd->add_option("--revision", args->revision, "snapshot of a Hugging Face repo id");
  cmd->add_option("--prompt", args->prompt, "prompt text (needs tokenizer.json in the model folder)");
  cmd->add_option("--prompt-ids", args->prompt_ids, "prompt token ids, comma-separated");
  cmd->add_option("--max-tokens", args->max_tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--logprobs", args->logprobs, "top-K log-probabilities per generated token")->capture_default_str();
  cmd->add_option("--output", args->output, "text or json")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu or cuda")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->callback([args] { run_generate(*args); });
}

}  // namespace pagellm::cli
