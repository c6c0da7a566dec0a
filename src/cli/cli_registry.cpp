#include "cli/commands.h"

namespace pagellm::cli {

// Defined in cmd_*.cpp.
void add_version_command(CLI::App& app);

void register_all_commands(CLI::App& app) {
  add_version_command(app);
}

}  // namespace pagellm::cli
