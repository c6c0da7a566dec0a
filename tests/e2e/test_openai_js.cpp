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
  EXPECT_NODE_TESTS_PASS("openai_client.test.mjs", server, 6);
}

// Structured outputs, tool_choice required / named and the Responses API through the client.
TEST(OpenAiJsClientTest, StructuredOutputsAndResponsesApi) {
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  EXPECT_NODE_TESTS_PASS("structured_client.test.mjs", server, 5);
}

}  // namespace
}  // namespace pagellm::e2e
