// The official OpenAI JavaScript client (npm `openai`, pinned in tests/e2e/js/package.json and
// installed by scripts/setup.sh) against the real server: runs `node --test` on
// tests/e2e/js/openai_client.test.mjs with the server's base URL in PAGELLM_BASE_URL.
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "serve_process.h"

namespace pagellm::e2e {
namespace {

TEST(OpenAiJsClientTest, NodeTestsPass) {
  const std::filesystem::path js = std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests" / "e2e" / "js";
  if (!std::filesystem::exists(js / "node_modules" / "openai" / "package.json"))
    GTEST_SKIP() << "the openai npm package is not installed in " << js.string() << ": run scripts/setup.sh";
  if (std::system("node --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  const std::string command = "cd '" + js.string() + "' && PAGELLM_BASE_URL=" + server.base_url() +
                              " PAGELLM_MODEL=" + kModelName + " node --test openai_client.test.mjs 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("# pass 6"), std::string::npos) << output;
}

}  // namespace
}  // namespace pagellm::e2e
