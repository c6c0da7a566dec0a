// pagellm: one binary, one subcommand per file (cli/cmd_*.cpp).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include <exception>

#include <CLI/CLI.hpp>

#include "core/version.h"
#include "cli/commands.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"pagellm: an LLM serving engine (paged KV cache, continuous batching)"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn, error, off")->capture_default_str();
  app.set_version_flag("--version", std::string(pagellm::pagellm_version()) + " (" + pagellm::pagellm_git_commit() + ")");
  app.parse_complete_callback([&] { pagellm::init_logging(log_level); });

  pagellm::cli::register_all_commands(app);

  // vLLM's two-letter short form, which CLI11 cannot name: -tp N is --tensor-parallel-size N.
  std::vector<std::string> args(argv + 1, argv + argc);
  for (std::string& arg : args)
    if (arg == "-tp") arg = "--tensor-parallel-size";
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last to first

  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const pagellm::cli::CommandError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
