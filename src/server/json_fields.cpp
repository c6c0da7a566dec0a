#include "server/json_fields.h"

#include <cmath>

#include <fmt/format.h>

namespace pagellm::server {

namespace {
const char* type_name(const nlohmann::ordered_json& value) { return value.type_name(); }
}  // namespace

const nlohmann::ordered_json* JsonFields::get(const char* name) const {
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void JsonFields::fail(std::string param, std::string message, std::string code) {
  if (!error_) error_ = bad_request(std::move(message), std::move(param), std::move(code));
}

std::optional<bool> JsonFields::boolean(const char* name) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) {
    fail(name, fmt::format("[openai] '{}' must be a boolean, got {}", name, type_name(*value)), "invalid_type");
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<int64_t> JsonFields::integer(const char* name, int64_t min, int64_t max) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_number_integer()) {
    fail(name, fmt::format("[openai] '{}' must be an integer, got {}", name, type_name(*value)), "invalid_type");
    return std::nullopt;
  }
  if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(name, fmt::format("[openai] '{}' must be in [{}, {}], got {}", name, min, max, value->get<uint64_t>()));
    return std::nullopt;
  }
  const int64_t v = value->get<int64_t>();
  if (v < min || v > max) {
    fail(name, fmt::format("[openai] '{}' must be in [{}, {}], got {}", name, min, max, v));
    return std::nullopt;
  }
  return v;
}

std::optional<double> JsonFields::number(const char* name, double min, double max) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_number()) {
    fail(name, fmt::format("[openai] '{}' must be a number, got {}", name, type_name(*value)), "invalid_type");
    return std::nullopt;
  }
  const double v = value->get<double>();
  if (!std::isfinite(v) || v < min || v > max) {
    fail(name, fmt::format("[openai] '{}' must be in [{}, {}], got {}", name, min, max, v));
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> JsonFields::string(const char* name) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    fail(name, fmt::format("[openai] '{}' must be a string, got {}", name, type_name(*value)), "invalid_type");
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::optional<std::vector<std::string>> JsonFields::string_or_list(const char* name, size_t max_items) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (value->is_string()) return std::vector<std::string>{value->get<std::string>()};
  bool ok = value->is_array() && value->size() <= max_items;
  if (ok)
    for (const auto& item : *value) ok = ok && item.is_string();
  if (!ok) {
    fail(name, fmt::format("[openai] '{}' must be a string or a list of at most {} strings", name, max_items),
         "invalid_type");
    return std::nullopt;
  }
  return value->get<std::vector<std::string>>();
}

std::optional<std::vector<int64_t>> JsonFields::integer_list(const char* name, int64_t min, int64_t max,
                                                             size_t max_items) {
  const nlohmann::ordered_json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_array() || value->size() > max_items) {
    fail(name, fmt::format("[openai] '{}' must be a list of at most {} integers", name, max_items), "invalid_type");
    return std::nullopt;
  }
  std::vector<int64_t> out;
  for (const auto& item : *value) {
    if (!item.is_number_integer() || (item.is_number_unsigned() && item.get<uint64_t>() > static_cast<uint64_t>(max)) ||
        item.get<int64_t>() < min || item.get<int64_t>() > max) {
      fail(name, fmt::format("[openai] '{}' items must be integers in [{}, {}], got {}", name, min, max,
                             item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
      return std::nullopt;
    }
    out.push_back(item.get<int64_t>());
  }
  return out;
}

int json_nesting_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > kMaxJsonDepth) return max_depth;
    } else if (c == ']' || c == '}') --depth;
  }
  return max_depth;
}

}  // namespace pagellm::server
