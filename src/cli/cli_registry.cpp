#include "cli/commands.h"

namespace pagellm::cli {

// Defined in cmd_*.cpp.
void add_version_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);
void add_bench_commands(CLI::App& app);
void add_bench_offline_commands(CLI::App& app);
void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_chat_template_command(CLI::App& app);

void register_all_commands(CLI::App& app) {
  add_version_command(app);
  add_tokenize_commands(app);
  add_bench_commands(app);
  add_bench_offline_commands(app);
  add_make_model_command(app);
  add_generate_command(app);
  add_serve_command(app);
  add_chat_template_command(app);
}

}  // namespace pagellm::cli
