// The official OpenAI JavaScript client (npm `openai`, pinned in tests/e2e/js/package.json and
// installed by scripts/setup.sh) against the real server: runs `node --test` on
// tests/e2e/js/openai_client.test.mjs with the server's base URL in PAGELLM_BASE_URL.
#include <cstdlib>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "serve_process.h"

namespace pagellm::e2e {
namespace {

TEST(OpenAiJsClientTest, NodeTestsPass) {
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  std::string why;
  const std::optional<NodeTestRun> run = run_node_tests("openai_client.test.mjs", server, &why);
  if (!run) {
    if (std::getenv("CI") != nullptr) FAIL() << why;
    GTEST_SKIP() << why;
  }
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_NE(run->output.find("# pass 6"), std::string::npos) << run->output;
}

// Structured outputs, tool_choice required / named and the Responses API through the client.
TEST(OpenAiJsClientTest, StructuredOutputsAndResponsesApi) {
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  std::string why;
  const std::optional<NodeTestRun> run = run_node_tests("structured_client.test.mjs", server, &why);
  if (!run) {
    if (std::getenv("CI") != nullptr) FAIL() << why;
    GTEST_SKIP() << why;
  }
  EXPECT_EQ(run->exit_code, 0) << run->output;
  EXPECT_NE(run->output.find("# pass 5"), std::string::npos) << run->output;
}

}  // namespace
}  // namespace pagellm::e2e
