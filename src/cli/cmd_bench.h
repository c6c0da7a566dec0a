// `pagellm bench ...`: the benchmark commands. Each lives in its own cmd_bench_*.cpp / cmd_bench.cpp
// and hangs itself under the one "bench" subcommand that bench_app() returns (creating it on first use).
#pragma once

#include <CLI/CLI.hpp>

namespace pagellm::cli {

// The "bench" subcommand of `app`, created on the first call.
CLI::App* bench_app(CLI::App& app);

// `bench serve` (load generator for any OpenAI-compatible server) and `bench fake-server`.
void add_bench_commands(CLI::App& app);

}  // namespace pagellm::cli
