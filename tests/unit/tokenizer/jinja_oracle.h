// Runs tools/render_chat_template.py (Python jinja2 configured as transformers does) on a batch
// of requests and returns its results, for tests that compare our renderer with jinja2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace pagellm::test {

inline std::string repo_path(const std::string& relative) { return std::string(PAGELLM_SOURCE_DIR) + "/" + relative; }

// Debian's /usr/bin/python3 has python3-jinja2 after scripts/setup.sh; otherwise python3 on PATH.
inline std::string python_with_jinja2() {
  static const std::string python = [] {
    for (const char* candidate : {"/usr/bin/python3", "python3"}) {
      std::string cmd = std::string(candidate) + " -c 'import jinja2' > /dev/null 2>&1";
      if (std::system(cmd.c_str()) == 0) return std::string(candidate);
    }
    return std::string();
  }();
  return python;
}

struct OracleResult {
  bool ok = false;
  std::string text;   // rendered prompt when ok
  std::string error;  // "ExceptionType: message" otherwise
};

// One python process for the whole batch. Returns an empty vector (and sets *why) on failure.
inline std::vector<OracleResult> run_jinja_oracle(const nlohmann::ordered_json& requests, std::string* why) {
  std::vector<OracleResult> results;
  const std::string python = python_with_jinja2();
  if (python.empty()) {
    *why = "no python3 with jinja2 (run scripts/setup.sh, which installs python3-jinja2)";
    return results;
  }
  std::string path = (std::filesystem::temp_directory_path() /
                      ("pagellm_jinja_oracle_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()) + ".json")).string();
  {
    std::ofstream out(path, std::ios::binary);
    out << requests.dump();
  }
  std::string cmd = python + " " + repo_path("tools/render_chat_template.py") + " --batch " + path;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
  std::string output;
  if (pipe) {
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe.get())) > 0) output.append(buf, n);
  }
  pipe.reset();
  std::filesystem::remove(path);
  nlohmann::json parsed = nlohmann::json::parse(output, nullptr, false);
  if (!parsed.is_array() || parsed.size() != requests.size()) {
    *why = "oracle produced no usable output: " + output.substr(0, 500);
    return results;
  }
  for (const auto& r : parsed) {
    OracleResult res;
    res.ok = r.value("ok", false);
    res.text = r.value("text", "");
    res.error = r.value("error", "");
    results.push_back(std::move(res));
  }
  return results;
}

}  // namespace pagellm::test
