#include <cstdio>

#include "core/version.h"
#include "cli/commands.h"

namespace pagellm::cli {

void add_version_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the version and build");
  cmd->callback([] { std::printf("pagellm %s (commit %s)\n", pagellm_version(), pagellm_git_commit()); });
}

}  // namespace pagellm::cli
