#include <cstdio>

#include "cli/commands.h"

namespace pagellm::cli {

void add_version_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the version and build");
  cmd->callback([] { std::printf("pagellm %s (commit %s)\n", PAGELLM_VERSION, PAGELLM_GIT_COMMIT); });
}

}  // namespace pagellm::cli
