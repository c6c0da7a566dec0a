// Every subcommand registers itself on the CLI11 app from its own cmd_*.cpp file.
// A command reports a user error by throwing CommandError (one line on stderr, exit code 1).
#pragma once

#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace pagellm {
struct EngineConfig;
}

namespace pagellm::cli {

class CommandError : public std::runtime_error {
 public:
  explicit CommandError(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  explicit CommandError(const Status& status) : CommandError(status.message()) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Throws CommandError when `status` is not ok.
inline void throw_if_error(const Status& status) {
  if (!status.is_ok()) throw CommandError(status);
}
template <typename T>
T value_or_throw(Expected<T> expected) {
  if (!expected.has_value()) throw CommandError(expected.status());
  return std::move(expected).value();
}

void register_all_commands(CLI::App& app);

// --node-rank > 0 (engine/tensor_parallel_worker.h): runs this process as a worker rank until rank 0
// stops the group and returns true (throws CommandError when it cannot join or load); false otherwise.
bool run_as_tensor_parallel_worker(const EngineConfig& config);

}  // namespace pagellm::cli
