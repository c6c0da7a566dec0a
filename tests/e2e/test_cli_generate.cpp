// `pagellm generate` as a user runs it: on a committed transformers fixture it prints the tokens
// transformers wrote; bad input is a one-line error and exit code 1.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct CommandResult {
  int exit_code = -1;
  std::string stdout_text;
  std::string stderr_text;
};

CommandResult run(const std::string& args) {
  const fs::path err = fs::temp_directory_path() / ("pagellm_cli_err_" + std::to_string(::getpid()));
  const std::string command = std::string(PAGELLM_CLI) + " " + args + " 2>" + err.string();
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) result.stdout_text.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err);
  result.stderr_text.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove(err);
  return result;
}

const fs::path kFixture = fs::path(PAGELLM_SOURCE_DIR) / "tests/golden/qwen3/untied_gqa1_hd16_f32";

std::string join(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

TEST(CliGenerate, PrintsTheTokensTransformersWrote) {
  std::ifstream in(kFixture / "expected.json");
  const auto expected = nlohmann::json::parse(in);
  for (const auto& c : expected["cases"]) {
    const auto prompt = c["prompt_ids"].get<std::vector<int>>();
    const auto want = c["greedy_token_ids"].get<std::vector<int>>();
    const CommandResult r = run("generate --model " + kFixture.string() + " --prompt-ids " + join(prompt) +
                                " --max-tokens " + std::to_string(want.size()) + " --output json --logprobs 3");
    ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
    const auto out = nlohmann::json::parse(r.stdout_text)["outputs"][0];
    EXPECT_EQ(out["prompt_ids"].get<std::vector<int>>(), prompt);
    EXPECT_EQ(out["token_ids"].get<std::vector<int>>(), want);
    ASSERT_EQ(out["logprobs"].size(), want.size());
    EXPECT_EQ(out["logprobs"][0].size(), 3u);
    EXPECT_EQ(out["logprobs"][0][0]["id"].get<int>(), want[0]);  // greedy: the top-1 is the token
    EXPECT_FALSE(out.contains("text")) << "the fixture has no tokenizer";
  }
}

TEST(CliGenerate, TensorParallelRanksPrintTheSameTokens) {
  // vLLM's -tp short form and the long flag; 4 ranks over the fixture's 4 KV heads, 2 over its 4 query heads.
  std::ifstream in(kFixture / "expected.json");
  const auto expected = nlohmann::json::parse(in);
  const auto& c = expected["cases"][0];
  const auto want = c["greedy_token_ids"].get<std::vector<int>>();
  for (const std::string flag : {"-tp 2", "--tensor-parallel-size 4"}) {
    const CommandResult r = run("generate --model " + kFixture.string() + " --prompt-ids " +
                                join(c["prompt_ids"].get<std::vector<int>>()) + " --max-tokens " +
                                std::to_string(want.size()) + " --output json " + flag);
    ASSERT_EQ(r.exit_code, 0) << flag << ": " << r.stderr_text;
    EXPECT_EQ(nlohmann::json::parse(r.stdout_text)["outputs"][0]["token_ids"].get<std::vector<int>>(), want) << flag;
  }
  const CommandResult bad = run("generate --model " + kFixture.string() + " --prompt-ids 1,2 -tp 3");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.stderr_text.find("--tensor-parallel-size 3 does not divide num_attention_heads 4"), std::string::npos)
      << bad.stderr_text;
}

TEST(CliGenerate, PromptsFileGivesJsonLinesInInputOrder) {
  const fs::path file = fs::temp_directory_path() / ("pagellm_prompts_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(file) << "{\"prompt_ids\": [1, 2, 3], \"max_tokens\": 4}\n{\"prompt_ids\": [7], \"max_tokens\": 2}\n";
  const CommandResult r = run("generate --model " + kFixture.string() + " --prompts-file " + file.string());
  fs::remove(file);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  std::istringstream lines(r.stdout_text);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(nlohmann::json::parse(first)["prompt_ids"].size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(first)["token_ids"].size(), 4u);
  EXPECT_EQ(nlohmann::json::parse(second)["token_ids"].size(), 2u);
}

TEST(CliGenerate, BadInputIsAOneLineError) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"generate --model " + kFixture.string() + " --prompt-ids 1,2,999999", "outside the vocabulary"},
      {"generate --model " + kFixture.string() + " --prompt-ids 1,x", "'x' is not a token id"},
      {"generate --model " + kFixture.string() + " --prompt hello", "no tokenizer.json"},
      {"generate --model /nonexistent/model --prompt-ids 1", "/nonexistent/model"},
      {"generate --model " + kFixture.string() + " --prompt-ids 1 --max-tokens 0", "max_tokens must be >= 1"},
      {"generate --model " + kFixture.string() + " --prompt-ids 1 --speculative-config '{\"method\": \"ngram\"'",
       "[speculative-config] not valid JSON"},
      {"generate --model " + kFixture.string() +
           " --prompt-ids 1 --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 99}'",
       "num_speculative_tokens must be in [1, 15], got 99"},
      {"generate --model " + kFixture.string() +
           " --prompt-ids 1 --speculative-config '{\"model\": \"/nonexistent/draft\", \"num_speculative_tokens\": 2}'",
       "/nonexistent/draft"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    // Log lines (start-up info) may precede it; the error itself is one line starting "error: ".
    const size_t at = r.stderr_text.find("error: ");
    ASSERT_NE(at, std::string::npos) << c.args << " -> " << r.stderr_text;
    const std::string error_line = r.stderr_text.substr(at);
    EXPECT_NE(error_line.find(c.expect), std::string::npos) << c.args << " -> " << error_line;
    EXPECT_EQ(std::count(error_line.begin(), error_line.end(), '\n'), 1) << error_line;
  }
}

// vLLM's engine flags on generate (and serve): --device auto, --dtype, --max-model-len with a suffix.
TEST(CliEngineFlags, AutoDeviceDtypeAndSuffixedLengths) {
  std::ifstream in(kFixture / "expected.json");
  const auto c = nlohmann::json::parse(in)["cases"][1];
  const auto want = c["greedy_token_ids"].get<std::vector<int>>();
  const CommandResult r = run("generate --model " + kFixture.string() + " --device auto --dtype float32 --max-model-len 1k" +
                              " --prompt-ids " + join(c["prompt_ids"].get<std::vector<int>>()) + " --max-tokens " +
                              std::to_string(want.size()) + " --output json");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(nlohmann::json::parse(r.stdout_text)["outputs"][0]["token_ids"].get<std::vector<int>>(), want);
  const CommandResult bad = run("generate --model " + kFixture.string() + " --max-model-len 12q --prompt-ids 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.stderr_text.find("max-model-len"), std::string::npos) << bad.stderr_text;
  const CommandResult bad_dtype = run("generate --model " + kFixture.string() + " --dtype int8 --prompt-ids 1");
  EXPECT_EQ(bad_dtype.exit_code, 1);
  EXPECT_NE(bad_dtype.stderr_text.find("--dtype 'int8'"), std::string::npos) << bad_dtype.stderr_text;
}

// `pagellm serve MODEL` with a port another process holds fails at once, before loading the model.
TEST(CliServe, PortInUseIsReportedBeforeTheModelLoads) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  const CommandResult r = run("serve " + kFixture.string() + " --port " + std::to_string(port));
  ::close(fd);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.stderr_text.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << r.stderr_text;
  EXPECT_EQ(r.stderr_text.find("KV cache"), std::string::npos) << "the model was loaded first: " << r.stderr_text;
  const CommandResult two = run("serve " + kFixture.string() + " --model /elsewhere --port 0");
  EXPECT_EQ(two.exit_code, 1);
  EXPECT_NE(two.stderr_text.find("two models given"), std::string::npos) << two.stderr_text;
}

}  // namespace
