// Shared helpers of the tokenizer tests: where the real tokenizers and the corpus live, a cache
// of loaded tokenizers (loading one takes about a second), and readable dumps of strings.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "round_trip.h"
#include "tokenizer/tokenizer.h"

// A test whose inputs are missing (assets/ or node_modules/ not fetched by scripts/setup.sh, a
// golden file not written yet) skips on a developer's machine but fails under CI=true, where
// setup.sh has run and a skip would hide that nothing was checked.
#define PAGELLM_SKIP_UNLESS_CI(message)                 \
  do {                                                  \
    if (::pagellm::test::in_ci()) {                     \
      FAIL() << message << " (CI is set: failing)";     \
    } else {                                            \
      GTEST_SKIP() << message;                          \
    }                                                   \
  } while (0)

namespace pagellm::test {

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string(ci) != "0" && std::string(ci) != "false";
}

inline const std::vector<std::string>& families() {
  static const std::vector<std::string> kFamilies = {"qwen3", "llama3", "gemma3", "deepseek_v3",
                                                     "gptoss", "llama2"};
  return kFamilies;
}

inline std::string source_path(const std::string& rel) { return std::string(PAGELLM_SOURCE_DIR) + "/" + rel; }
inline std::string tokenizer_dir(const std::string& family) {
  return source_path("assets/tokenizers/" + family);
}
inline bool have_tokenizer(const std::string& family) {
  return std::filesystem::exists(tokenizer_dir(family) + "/tokenizer.json");
}

// Loaded once per test process; nullptr when assets are missing.
inline std::shared_ptr<const Tokenizer> load_family(const std::string& family) {
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;
  auto it = cache.find(family);
  if (it != cache.end()) return it->second;
  std::shared_ptr<const Tokenizer> tok;
  if (have_tokenizer(family)) {
    auto loaded = Tokenizer::from_dir(tokenizer_dir(family));
    if (loaded) tok = *loaded;
  }
  cache[family] = tok;
  return tok;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline const std::vector<std::string>& corpus() {
  static const std::vector<std::string> strings =
      read_json(source_path("tests/golden/tokenizer/corpus.json"))["strings"].get<std::vector<std::string>>();
  return strings;
}

// Escapes a string for failure messages (control and non-ASCII bytes as \xHH), cut to 120 bytes.
inline std::string show(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 120; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > 120) out += "...(" + std::to_string(s.size()) + " bytes)";
  return out;
}

inline std::string show_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  if (ids.size() > 40) out += ",...(" + std::to_string(ids.size()) + ")";
  return out + "]";
}

}  // namespace pagellm::test
