// Shared helpers of the structured-output tests: real tokenizers' vocabularies (loaded once per
// process; a missing asset fails under CI=true and skips otherwise), a small JSON Schema
// validator for the keywords the test schemas use, and mask helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::structured::test {

inline std::string tokenizer_dir(const std::string& family) {
  return std::string(PAGELLM_SOURCE_DIR) + "/assets/tokenizers/" + family;
}

struct LoadedVocab {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const TokenVocabulary> vocab;
};

// nullptr vocab when the asset is missing (the caller skips or fails, see MISSING_ASSET below).
inline const LoadedVocab& load_vocab(const std::string& family) {
  static std::map<std::string, LoadedVocab> cache;
  auto it = cache.find(family);
  if (it != cache.end()) return it->second;
  LoadedVocab loaded;
  if (std::filesystem::exists(tokenizer_dir(family) + "/tokenizer.json")) {
    auto tok = Tokenizer::from_dir(tokenizer_dir(family));
    if (tok) {
      loaded.tokenizer = *tok;
      auto vocab = TokenVocabulary::from_tokenizer(**tok);
      if (vocab) loaded.vocab = *vocab;
    }
  }
  return cache[family] = loaded;
}

inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Use at the top of a test: `REQUIRE_VOCAB(v, "qwen3");`
#define REQUIRE_VOCAB(var, family)                                                             \
  const auto& var = ::pagellm::structured::test::load_vocab(family);                           \
  if (!var.vocab) {                                                                            \
    if (::pagellm::structured::test::running_in_ci()) FAIL() << "missing tokenizer " << (family); \
    GTEST_SKIP() << "tokenizer asset missing: " << (family);                                    \
  }

inline std::vector<int32_t> allowed_ids(const std::vector<uint32_t>& words, int32_t vocab_size) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if ((words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1) ids.push_back(id);
  }
  return ids;
}

inline size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Validates `value` against the keywords the test schemas use; returns "" or what is wrong.
inline std::string validate(const nlohmann::json& value, const nlohmann::json& schema, const nlohmann::json& root) {
  using json = nlohmann::json;
  if (schema.is_boolean()) return schema.get<bool>() ? "" : "false schema";
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    return validate(value, root.at(json::json_pointer(ref.substr(1))), root);
  }
  if (schema.value("nullable", false) && value.is_null()) return "";
  if (schema.contains("anyOf") || schema.contains("oneOf")) {
    for (const auto& branch : schema.contains("anyOf") ? schema["anyOf"] : schema["oneOf"]) {
      if (validate(value, branch, root).empty()) return "";
    }
    return "no anyOf/oneOf branch matches " + value.dump();
  }
  if (schema.contains("const") && value != schema["const"]) return "const mismatch " + value.dump();
  if (schema.contains("enum")) {
    bool found = false;
    for (const auto& v : schema["enum"]) found = found || v == value;
    if (!found) return "not in enum: " + value.dump();
  }
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_string()) types.push_back(schema["type"]);
    else for (const auto& t : schema["type"]) types.push_back(t);
    bool ok = false;
    for (const auto& t : types) {
      ok = ok || (t == "object" && value.is_object()) || (t == "array" && value.is_array()) ||
           (t == "string" && value.is_string()) || (t == "integer" && value.is_number_integer()) ||
           (t == "number" && value.is_number()) || (t == "boolean" && value.is_boolean()) ||
           (t == "null" && value.is_null());
    }
    if (!ok) return "wrong type: " + value.dump();
  }
  if (value.is_number()) {
    if (schema.contains("minimum") && value.get<double>() < schema["minimum"].get<double>()) return "below minimum";
    if (schema.contains("maximum") && value.get<double>() > schema["maximum"].get<double>()) return "above maximum";
  }
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    const size_t len = count_code_points(s);
    if (schema.contains("minLength") && len < schema["minLength"].get<size_t>()) return "too short: " + s;
    if (schema.contains("maxLength") && len > schema["maxLength"].get<size_t>()) return "too long: " + s;
    if (schema.contains("pattern") && !std::regex_search(s, std::regex(schema["pattern"].get<std::string>()))) {
      return "pattern mismatch: " + s;
    }
  }
  if (value.is_array()) {
    const size_t n = value.size();
    if (schema.contains("minItems") && n < schema["minItems"].get<size_t>()) return "too few items";
    if (schema.contains("maxItems") && n > schema["maxItems"].get<size_t>()) return "too many items";
    const size_t prefix = schema.contains("prefixItems") ? schema["prefixItems"].size() : 0;
    for (size_t i = 0; i < n; ++i) {
      const json& item_schema = i < prefix ? schema["prefixItems"][i] : schema.value("items", json(true));
      if (auto e = validate(value[i], item_schema, root); !e.empty()) return "[" + std::to_string(i) + "] " + e;
    }
  }
  if (value.is_object()) {
    for (const auto& r : schema.value("required", json::array())) {
      if (!value.contains(r.get<std::string>())) return "missing required " + r.dump();
    }
    const json props = schema.value("properties", json::object());
    for (const auto& [key, v] : value.items()) {
      if (props.contains(key)) {
        if (auto e = validate(v, props[key], root); !e.empty()) return key + ": " + e;
      } else {
        const json extra = schema.value("additionalProperties", json(false));
        if (extra == false) return "unexpected property " + key;
        if (auto e = validate(v, extra, root); !e.empty()) return key + ": " + e;
      }
    }
  }
  return "";
}

}  // namespace pagellm::structured::test
