// JsonFields: typed reading of a request object's optional fields. A field that is absent or null
// reads as nullopt; a present field of the wrong type or out of range records the first error
// (with the field as OpenAI's "param") and reads as nullopt, so parsers read on and check once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace pagellm::server {

class JsonFields {
 public:
  explicit JsonFields(const nlohmann::ordered_json& object) : object_(object) {}

  const nlohmann::ordered_json* get(const char* name) const;  // nullptr when absent or null
  std::optional<bool> boolean(const char* name);
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max);
  std::optional<double> number(const char* name, double min, double max);
  std::optional<std::string> string(const char* name);
  // A string or a list of strings ("stop").
  std::optional<std::vector<std::string>> string_or_list(const char* name, size_t max_items);
  std::optional<std::vector<int64_t>> integer_list(const char* name, int64_t min, int64_t max, size_t max_items);

  void fail(std::string param, std::string message, std::string code = "invalid_value");
  bool ok() const { return !error_.has_value(); }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  const nlohmann::ordered_json& object_;
  std::optional<ApiError> error_;
};

// The deepest JSON nesting we accept; deeper bodies are refused before parsing (a 16 MB "[[[[..."
// would otherwise cost a deep recursion in the JSON library's writers and destructors).
constexpr int kMaxJsonDepth = 64;
int json_nesting_depth(std::string_view text);  // outside strings; stops counting past kMaxJsonDepth

}  // namespace pagellm::server
