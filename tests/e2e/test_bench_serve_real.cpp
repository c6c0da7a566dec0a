// `pagellm bench serve` against the real `pagellm serve` on 127.0.0.1: every request completes,
// the reported token counts are the server's, and the timing metrics are consistent with each other.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "serve_process.h"

namespace pagellm::e2e {
namespace {

namespace fs = std::filesystem;

int run_bench(const std::string& args, std::string* output) {
  const std::string command = std::string(PAGELLM_CLI) + " bench serve " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output->append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(BenchServeAgainstPagellm, RandomDatasetCompletesWithConsistentMetrics) {
  ServeProcess server({"--max-num-seqs", "8"});
  ASSERT_TRUE(server.ready()) << server.log();
  const fs::path result = fs::temp_directory_path() / ("pagellm_bench_real_" + std::to_string(::getpid()) + ".json");
  std::string output;
  const int rc = run_bench("--base-url " + server.base_url() + " --model " + kModelName +
                               " --tokenizer " + e2e_model_dir() +
                               " --dataset random --random-input-len 32 --random-output-len 12 --ignore-eos"
                               " --num-prompts 16 --max-concurrency 4 --request-rate inf --seed 1 --no-progress"
                               " --result-json " + result.string(),
                           &output);
  ASSERT_EQ(rc, 0) << output;
  std::ifstream in(result);
  const nlohmann::json r = nlohmann::json::parse(in);
  fs::remove(result);
  EXPECT_EQ(r["completed"].get<int>(), 16) << output;
  EXPECT_EQ(r["failed"].get<int>(), 0) << output;
  EXPECT_EQ(r["total_output_tokens"].get<int>(), 16 * 12) << "ignore_eos: every request gives 12 tokens";
  EXPECT_EQ(r["total_input_tokens"].get<int>(), 16 * 32);
  EXPECT_LE(r["max_concurrency"].get<int>(), 4);
  const double ttft = r["mean_ttft_ms"], e2el = r["mean_e2el_ms"], tpot = r["mean_tpot_ms"], duration = r["duration"];
  EXPECT_GT(ttft, 0.0);
  EXPECT_GT(e2el, ttft);
  EXPECT_GT(tpot, 0.0);
  // E2EL = TTFT + 11 inter-token gaps, request by request, so the means agree too.
  EXPECT_NEAR(e2el, ttft + 11 * tpot, 0.02 * e2el + 1.0);
  EXPECT_NEAR(r["output_throughput"].get<double>(), 16 * 12 / duration, 1e-6 * 16 * 12 / duration + 1e-9);
}

}  // namespace
}  // namespace pagellm::e2e
