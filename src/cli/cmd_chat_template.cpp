// pagellm chat-template: renders a tokenizer's chat template on a conversation, printing the
// prompt exactly as transformers' apply_chat_template would produce it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tokenizer/chat_template.h"

namespace pagellm::cli {

namespace {

struct ChatTemplateArgs {
  std::string tokenizer, messages, tools, kwargs, chat_template;
  bool add_generation_prompt = false;
};

std::string read_file(const std::string& path, const char* what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw CommandError(fmt::format("[chat-template] cannot open {} file {}", what, path));
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

nlohmann::ordered_json parse_json(const std::string& text, const std::string& where) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw CommandError(fmt::format("[chat-template] {} is not valid JSON: {}", where, e.what()));
  }
}

void run(const ChatTemplateArgs& args) {
  // --tokenizer is a folder holding tokenizer_config.json, or that file itself.
  std::filesystem::path config = args.tokenizer;
  if (std::filesystem::is_directory(config)) config /= "tokenizer_config.json";
  ChatTemplate tmpl = [&] {
    if (args.chat_template.empty()) return value_or_throw(ChatTemplate::from_tokenizer_config(config.string()));
    // An explicit template still takes its special tokens from the tokenizer's config when present.
    nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
    if (!args.tokenizer.empty() && std::filesystem::exists(config)) {
      tokens = parse_json(read_file(config.string(), "tokenizer config"), config.string());
      tokens.erase("chat_template");
    }
    return value_or_throw(ChatTemplate::from_string(read_file(args.chat_template, "chat template"), tokens));
  }();
  ChatTemplateInputs inputs;
  inputs.messages = parse_json(read_file(args.messages, "messages"), args.messages);
  if (!inputs.messages.is_array()) throw CommandError("[chat-template] --messages must hold a JSON array of messages");
  if (!args.tools.empty()) inputs.tools = parse_json(read_file(args.tools, "tools"), args.tools);
  if (!args.kwargs.empty()) {
    inputs.extra_kwargs = parse_json(args.kwargs, "--kwargs");
    if (!inputs.extra_kwargs.is_object()) throw CommandError("[chat-template] --kwargs must be a JSON object");
  }
  inputs.add_generation_prompt = args.add_generation_prompt;
  const std::string prompt = value_or_throw(tmpl.render(inputs));
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
}

}  // namespace

void add_chat_template_command(CLI::App& app) {
  auto args = std::make_shared<ChatTemplateArgs>();
  auto* cmd = app.add_subcommand("chat-template", "Render a tokenizer's chat template on a conversation");
  cmd->add_option("--tokenizer", args->tokenizer, "Folder with tokenizer_config.json (or the file itself)");
  cmd->add_option("--messages", args->messages, "JSON file: an array of {role, content, ...} messages")->required();
  cmd->add_option("--tools", args->tools, "JSON file: an array of tool schemas");
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt, "End with the assistant turn header");
  cmd->add_option("--kwargs", args->kwargs, "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  cmd->add_option("--chat-template", args->chat_template, "Jinja template file to use instead of the tokenizer's");
  cmd->callback([args] {
    if (args->tokenizer.empty() && args->chat_template.empty())
      throw CommandError("[chat-template] give --tokenizer DIR or --chat-template FILE");
    run(*args);
  });
}

}  // namespace pagellm::cli
