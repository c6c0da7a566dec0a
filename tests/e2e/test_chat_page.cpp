// The chat page at / of `pagellm serve`: served from the binary, off with --no-ui, open without the
// API key; driven in headless Chromium (Debian's chromium through npm puppeteer-core, pinned in
// tests/e2e/browser/package.json, both installed by scripts/setup.sh) by
// tests/e2e/browser/chat_page.mjs; its Markdown renderer under node's test runner.
//
// PAGELLM_CHAT_PAGE_SCREENSHOT=FILE.png makes the browser test save a screenshot there (docs/chat-page.png).
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

namespace fs = std::filesystem;

const fs::path kBrowserDir = fs::path(PAGELLM_SOURCE_DIR) / "tests" / "e2e" / "browser";

std::string chromium_path() {
  const char* chosen = std::getenv("PAGELLM_CHROMIUM");
  return chosen != nullptr ? chosen : "/usr/bin/chromium";
}

// What is missing to run the browser test ("" when nothing is).
std::string missing_browser_tools() {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node is not installed";
  if (!fs::exists(kBrowserDir / "node_modules" / "puppeteer-core" / "package.json"))
    return "puppeteer-core is not installed in " + kBrowserDir.string() + ": run scripts/setup.sh";
  if (!fs::exists(chromium_path())) return chromium_path() + " is missing (apt-get install chromium, or scripts/setup.sh)";
  return "";
}

// Skips the test when the browser or puppeteer-core is missing; under CI=true fails it instead.
#define REQUIRE_BROWSER_TOOLS()                                  \
  do {                                                           \
    const std::string missing = missing_browser_tools();         \
    if (!missing.empty()) {                                      \
      if (std::getenv("CI") != nullptr) FAIL() << missing;       \
      GTEST_SKIP() << missing;                                   \
    }                                                            \
  } while (0)

NodeTestRun run_chat_page_script(const ServeProcess& server, const std::string& extra_args) {
  std::string command = "cd '" + kBrowserDir.string() + "' && timeout 120 node chat_page.mjs " + server.base_url() +
                        " --model " + kModelName + extra_args;
  if (const char* screenshot = std::getenv("PAGELLM_CHAT_PAGE_SCREENSHOT")) command += std::string(" --screenshot '") + screenshot + "'";
  return run_shell(command);
}

TEST(ChatPageTest, ServedFromTheBinaryWithoutAKey) {
  ServeProcess server({"--api-key", "sesame"});
  ASSERT_TRUE(server.ready()) << server.log();
  const HttpResult page = http_get(server.port(), "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.header("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(page.header("content-security-policy").find("default-src 'self'"), std::string::npos);
  EXPECT_NE(page.body.find("<script type=\"module\" src=\"ui/app.js\"></script>"), std::string::npos);
  for (const std::string& file : {"app.js", "chat_api.js", "conversation_store.js", "markdown.js", "reply.js", "settings.js"}) {
    const HttpResult script = http_get(server.port(), "/ui/" + file);
    EXPECT_EQ(script.status, 200) << file;
    EXPECT_EQ(script.header("content-type"), "text/javascript; charset=utf-8") << file;
    EXPECT_GT(script.body.size(), 500u) << file;
  }
  EXPECT_EQ(http_get(server.port(), "/ui/style.css").header("content-type"), "text/css; charset=utf-8");
  EXPECT_EQ(http_get(server.port(), "/ui/favicon.svg").header("content-type"), "image/svg+xml");
  // Only the page's own files; index.html is served at / alone.
  EXPECT_EQ(http_get(server.port(), "/ui/missing.js").status, 404);
  EXPECT_EQ(http_get(server.port(), "/ui/index.html").status, 404);
  EXPECT_EQ(http_get(server.port(), "/ui/../v1/models").status, 404);
  EXPECT_EQ(http_post(server.port(), "/", "{}").status, 405);
  // The API keeps its key.
  EXPECT_EQ(http_get(server.port(), "/v1/models").status, 401);
  EXPECT_EQ(http_get(server.port(), "/v1/models", "Authorization: Bearer sesame\r\n").status, 200);
  EXPECT_NE(server.log().find("chat page at " + server.base_url() + "/"), std::string::npos) << server.log();
}

TEST(ChatPageTest, NoUiTurnsThePageOff) {
  ServeProcess server({"--no-ui"});
  ASSERT_TRUE(server.ready()) << server.log();
  for (const std::string& path : {"/", "/ui/app.js"}) {
    const HttpResult result = http_get(server.port(), path);
    EXPECT_EQ(result.status, 404) << path;
    EXPECT_EQ(result.json()["error"]["code"], "not_found") << result.body;
  }
  EXPECT_EQ(http_get(server.port(), "/v1/models").status, 200);
  EXPECT_EQ(server.log().find("chat page at"), std::string::npos);
}

// Send, stream, settings, Stop (the engine aborts the request), reload, new / rename / delete,
// copy, theme, phone layout, no console errors: see chat_page.mjs.
TEST(ChatPageTest, WorksInChromium) {
  REQUIRE_BROWSER_TOOLS();
  ServeProcess server;
  ASSERT_TRUE(server.ready()) << server.log();
  const NodeTestRun run = run_chat_page_script(server, "");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("ok Stop aborts a long reply and the engine frees the request"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ok no console errors"), std::string::npos) << run.output;
  // The engine saw the page hang up when Stop was pressed.
  EXPECT_NE(server.log().find("(client gone)"), std::string::npos) << server.log();
}

TEST(ChatPageTest, AsksForTheApiKeyInChromium) {
  REQUIRE_BROWSER_TOOLS();
  ServeProcess server({"--api-key", "sesame"});
  ASSERT_TRUE(server.ready()) << server.log();
  const NodeTestRun run = run_chat_page_script(server, " --api-key sesame");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("ok the right key lists the models and chats"), std::string::npos) << run.output;
}

TEST(ChatPageTest, MarkdownRendererAndReplies) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    if (std::getenv("CI") != nullptr) FAIL() << "node is not installed";
    GTEST_SKIP() << "node is not installed";
  }
  const NodeTestRun run = run_shell("cd '" + kBrowserDir.string() + "' && node --test markdown.test.mjs");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("# fail 0"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("# pass 0"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace pagellm::e2e
