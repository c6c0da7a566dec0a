#include "serve_process.h"


#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "http_test_client.h"

namespace pagellm::e2e {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int run_and_wait(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string e2e_model_dir() {
  const fs::path dir = fs::path(PAGELLM_BINARY_DIR) / "e2e-model-qwen3-tiny-f32";
  if (fs::exists(dir / "config.json")) return dir.string();
  // One maker at a time across test processes; the others wait for it and find the folder.
  const std::string lock_path = (fs::path(PAGELLM_BINARY_DIR) / "e2e-model.lock").string();
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  ::flock(lock, LOCK_EX);
  if (!fs::exists(dir / "config.json")) {
    const fs::path partial = dir.string() + ".partial";
    fs::remove_all(partial);
    if (run_and_wait({PAGELLM_CLI, "make-model", "--preset", "qwen3-tiny", "--dtype", "f32", "--out", partial.string()}) == 0)
      fs::rename(partial, dir);
  }
  ::flock(lock, LOCK_UN);
  ::close(lock);
  return dir.string();
}

ServeProcess::ServeProcess(const std::vector<std::string>& extra_args) {
  // A --model among extra_args replaces the default model (CLI11 takes each option once).
  const bool has_model = std::find(extra_args.begin(), extra_args.end(), "--model") != extra_args.end();
  const std::string model = has_model ? "" : e2e_model_dir();
  char log_template[] = "/tmp/pagellm-serve-XXXXXX";
  const int log_fd = ::mkstemp(log_template);
  log_path_ = log_template;
  std::vector<std::string> argv = {PAGELLM_CLI, "serve", "--served-model-name", kModelName,
                                   "--host", "127.0.0.1", "--port", "0", "--max-model-len",
                                   std::to_string(kMaxModelLen), "--kv-cache-memory", std::to_string(64 << 20)};
  if (!has_model) argv.insert(argv.begin() + 2, {"--model", model});
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  pid_ = spawn_logged(argv, log_fd);
  ::close(log_fd);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  const std::string marker = "listening on http://127.0.0.1:";
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    const size_t at = text.find(marker);
    if (at != std::string::npos) {
      const int port = std::atoi(text.c_str() + at + marker.size());
      if (http_get(port, "/health").status == 200) {
        port_ = port;
        return;
      }
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;  // exited during start-up: ready() is false, log() says why
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int spawn_logged(const std::vector<std::string>& argv, int log_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int pid = ::fork();
  if (pid == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

ServeProcess::~ServeProcess() {
  if (pid_ > 0) (void)stop(SIGTERM, 15000);
  if (pid_ > 0) {  // still running after the timeout
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ::unlink(log_path_.c_str());
}

std::string ServeProcess::base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }

std::string ServeProcess::log() const { return read_text(log_path_); }

int wait_for_exit(int& pid, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

int ServeProcess::stop(int signal, int timeout_ms) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  return wait_for_exit(pid_, timeout_ms);
}

std::optional<NodeTestRun> run_node_tests(const std::string& test_file, const ServeProcess& server, std::string* why) {
  const std::filesystem::path js = std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests" / "e2e" / "js";
  if (!std::filesystem::exists(js / "node_modules" / "openai" / "package.json")) {
    *why = "the openai npm package is not installed in " + js.string() + ": run scripts/setup.sh";
    return std::nullopt;
  }
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *why = "node is not installed";
    return std::nullopt;
  }
  return run_shell("cd '" + js.string() + "' && PAGELLM_BASE_URL=" + server.base_url() + " PAGELLM_MODEL=" + kModelName +
                   " node --test " + test_file);
}

NodeTestRun run_shell(const std::string& command) {
  NodeTestRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    run.output = "popen failed";
    return run;
  }
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace pagellm::e2e
