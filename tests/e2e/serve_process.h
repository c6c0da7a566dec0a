// ServeProcess: runs the real `pagellm serve` binary (PAGELLM_CLI) on 127.0.0.1 with a free port
// (--port 0; the port is read from its "listening on" line) and waits until /health answers 200.
// The model is qwen3-tiny with the real Qwen3 tokenizer and random f32 weights, made once per
// build folder. Destruction sends SIGTERM and waits.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace pagellm::e2e {

inline constexpr const char* kModelName = "test-model";
inline constexpr int kMaxModelLen = 1024;

// The e2e model folder (made under PAGELLM_BINARY_DIR on first use, safe against parallel tests).
std::string e2e_model_dir();

// Starts argv[0] with argv, its stdout and stderr into log_fd; returns its pid.
int spawn_logged(const std::vector<std::string>& argv, int log_fd);
// The exit code of child `pid` once it exits within timeout_ms (pid becomes -1); -1 when a signal
// ended it or it still runs.
int wait_for_exit(int& pid, int timeout_ms);

class ServeProcess {
 public:
  // Default flags: --model e2e_model_dir() --served-model-name test-model --max-model-len 1024
  // --kv-cache-memory 64 MiB; `extra_args` come after them (later flags win; a --model there
  // replaces the default model).
  explicit ServeProcess(const std::vector<std::string>& extra_args = {});
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  bool ready() const { return port_ > 0; }
  int port() const { return port_; }
  std::string base_url() const;
  std::string log() const;  // the server's stderr and stdout so far
  // Sends `signal` and waits up to timeout_ms; returns the exit code, or -1 (killed, timed out).
  int stop(int signal, int timeout_ms);

 private:
  int pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

// Runs `node --test FILE` (a test file of tests/e2e/js, written against the official OpenAI client)
// against `server`, with its base URL and model name in PAGELLM_BASE_URL / PAGELLM_MODEL. Returns
// the node output, or nullopt (with `why`) when node or the client package is missing: the caller
// skips then, and fails under CI=true.
struct NodeTestRun {
  int exit_code = -1;
  std::string output;
};
// Runs `command` under sh, stdout and stderr together; popen's failure is exit_code -1.
NodeTestRun run_shell(const std::string& command);
std::optional<NodeTestRun> run_node_tests(const std::string& test_file, const ServeProcess& server, std::string* why);

// In a test body: FILE's node tests against SERVER all pass, NUM_PASSED of them.
#define EXPECT_NODE_TESTS_PASS(file, server, num_passed)                                        \
  do {                                                                                          \
    std::string why_not_run;                                                                    \
    const std::optional<::pagellm::e2e::NodeTestRun> node_run =                                 \
        ::pagellm::e2e::run_node_tests(file, server, &why_not_run);                             \
    if (!node_run) {                                                                            \
      if (std::getenv("CI") != nullptr) FAIL() << why_not_run;                                  \
      GTEST_SKIP() << why_not_run;                                                              \
    }                                                                                           \
    EXPECT_EQ(node_run->exit_code, 0) << node_run->output;                                      \
    EXPECT_NE(node_run->output.find("# pass " #num_passed), std::string::npos) << node_run->output; \
  } while (0)

}  // namespace pagellm::e2e
