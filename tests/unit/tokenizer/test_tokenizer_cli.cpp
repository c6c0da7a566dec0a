// `pagellm tokenize` and `pagellm detokenize` as a user runs them: the printed ids are those of
// Tokenizer::encode, the printed text that of Tokenizer::decode, and mistakes (a missing
// tokenizer, bad --ids, invalid UTF-8) exit with code 1 and one line on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `pagellm <args>` through the shell, capturing stdout and stderr separately.
CommandResult run_cli(const std::string& args) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("pagellm_tok_cli_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string cmd = quote(PAGELLM_CLI) + " " + args + " >" + dir + "/out 2>" + dir + "/err";
  CommandResult r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_all(dir + "/out");
  r.err = read_all(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

bool have_cli() { return std::filesystem::exists(PAGELLM_CLI); }

#define SKIP_WITHOUT_CLI_OR(family)                                                       \
  if (!have_cli()) GTEST_SKIP() << PAGELLM_CLI << " not built";                            \
  if (!have_tokenizer(family)) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" family " missing: run scripts/setup.sh")

void expect_one_line_error(const CommandResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: '" << r.err << "'";
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

TEST(TokenizerCli, TokenizePrintsTheIdsOfEncode) {
  SKIP_WITHOUT_CLI_OR("qwen3");
  auto tok = load_family("qwen3");
  ASSERT_TRUE(tok);
  for (const std::string text : {"Hello world", "héllo 👋 <|im_start|>user\n12345", ""}) {
    for (bool special : {false, true}) {
      auto r = run_cli("tokenize --tokenizer " + quote(tokenizer_dir("qwen3")) + " --text " + quote(text) +
                       (special ? " --add-special-tokens" : ""));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.err, "");
      ASSERT_FALSE(r.out.empty());
      EXPECT_EQ(r.out.back(), '\n');
      const auto printed = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
      EXPECT_EQ(printed, *tok->encode(text, special)) << show(text);
    }
  }
  // A tokenizer.json file works as well as its folder.
  auto r = run_cli("tokenize --tokenizer " + quote(tokenizer_dir("qwen3") + "/tokenizer.json") + " --text 'Hello world'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), *tok->encode("Hello world", false));
}

TEST(TokenizerCli, DetokenizePrintsTheTextOfDecode) {
  SKIP_WITHOUT_CLI_OR("llama3");
  auto tok = load_family("llama3");
  ASSERT_TRUE(tok);
  const std::string text = "<|begin_of_text|>Hello world, ünïcödé 🤖";
  const std::vector<int32_t> ids = *tok->encode(text, false);
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) list += (i ? "," : "") + std::to_string(ids[i]);
  auto r = run_cli("detokenize --tokenizer " + quote(tokenizer_dir("llama3")) + " --ids " + list);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, tok->decode(ids, false) + "\n");
  EXPECT_EQ(r.out, text + "\n");
  r = run_cli("detokenize --tokenizer " + quote(tokenizer_dir("llama3")) + " --skip-special-tokens --ids '[" + list + "]'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, tok->decode(ids, true) + "\n");
  EXPECT_EQ(r.out, "Hello world, ünïcödé 🤖\n");
}

TEST(TokenizerCli, MissingTokenizerIsOneLineError) {
  if (!have_cli()) GTEST_SKIP() << PAGELLM_CLI << " not built";
  expect_one_line_error(run_cli("tokenize --tokenizer /nonexistent/tok --text hi"), "not found");
  expect_one_line_error(run_cli("detokenize --tokenizer /nonexistent/tok --ids 1,2"), "not found");
  // A folder without tokenizer.json, and a file that is not a tokenizer.json.
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("pagellm_tok_cli_dir_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  expect_one_line_error(run_cli("tokenize --tokenizer " + dir + " --text hi"), "tokenizer.json");
  std::ofstream(dir + "/broken.json") << "{\"model\": {\"type\": \"BPE\",\n \"vocab\": [";
  expect_one_line_error(run_cli("tokenize --tokenizer " + dir + "/broken.json --text hi"), "[tokenizer]");
  std::filesystem::remove_all(dir);
}

TEST(TokenizerCli, InvalidIdsAndInvalidTextAreOneLineErrors) {
  SKIP_WITHOUT_CLI_OR("qwen3");
  const std::string tok = " --tokenizer " + quote(tokenizer_dir("qwen3"));
  for (const std::string ids : {"1,x,3", "1;2", "-5", "99999999999", "1.5", "0x10"}) {
    SCOPED_TRACE(ids);
    expect_one_line_error(run_cli("detokenize" + tok + " --ids=" + quote(ids)), "--ids");
  }
  // /bin/sh's printf writes the byte 0xFF.
  expect_one_line_error(run_cli("tokenize" + tok + " --text \"$(printf 'ab\\377c')\""), "offset 2");
}

}  // namespace
}  // namespace pagellm::test
