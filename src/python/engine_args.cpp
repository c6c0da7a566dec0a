#include "python/engine_args.h"

#include <algorithm>

#include <fmt/format.h>

namespace pagellm::python {

namespace {

std::string option_name(const std::string& keyword) {
  std::string name = "--" + keyword;
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

// vLLM's spelling where pagellm's flag differs.
std::string canonical_keyword(const std::string& keyword) {
  if (keyword == "kv_cache_memory_bytes") return "kv_cache_memory";
  return keyword;
}

}  // namespace

std::vector<std::string> engine_arg_names() {
  EngineConfig config;
  CLI::App app;
  add_engine_options(app, config);
  std::vector<std::string> names = {"kv_cache_memory_bytes"};
  for (const CLI::Option* option : app.get_options()) {
    for (std::string name : option->get_lnames()) {
      if (name.rfind("no-", 0) == 0 || name == "help") continue;
      std::replace(name.begin(), name.end(), '-', '_');
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Expected<EngineConfig> engine_config_from_args(const std::vector<EngineArg>& args) {
  EngineConfig config;
  CLI::App app("LLM");
  add_engine_options(app, config);
  std::vector<std::string> argv;
  for (const EngineArg& arg : args) {
    const std::string keyword = canonical_keyword(arg.name);
    if (arg.is_bool) {
      const std::string flag = arg.bool_value ? option_name(keyword) : option_name("no_" + keyword);
      const CLI::Option* option = app.get_option_no_throw(flag);
      if (option && option->get_expected_min() == 0) {
        argv.push_back(flag);
        continue;
      }
    }
    const CLI::Option* option = app.get_option_no_throw(option_name(keyword));
    if (!option) return not_found("LLM() got an unexpected keyword argument '{}'", arg.name);
    if (option->get_expected_min() == 0)
      return invalid_argument("[engine] {} must be True or False", arg.name);
    argv.push_back(option_name(keyword));
    argv.push_back(arg.is_bool ? (arg.bool_value ? "true" : "false") : arg.text);
  }
  std::reverse(argv.begin(), argv.end());  // CLI11 takes the arguments last first
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    return invalid_argument("[engine] {}", e.what());
  }
  return config;
}

}  // namespace pagellm::python
