#include "tokenizer/pattern.h"

#include <nlohmann/json.hpp>

namespace pagellm {

Expected<Pattern> Pattern::from_json(const nlohmann::json& config) {
  if (config.is_object() && config.contains("String") && config["String"].is_string()) {
    return literal(config["String"].get<std::string>());
  }
  if (config.is_object() && config.contains("Regex") && config["Regex"].is_string()) {
    Pattern pattern;
    PAGELLM_ASSIGN_OR_RETURN(pattern.regex_, Regex::compile(config["Regex"].get<std::string>()));
    return pattern;
  }
  return invalid_argument("[tokenizer] a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}");
}

Pattern Pattern::literal(std::string text) {
  Pattern pattern;
  pattern.literal_ = std::move(text);
  return pattern;
}

Status Pattern::find_all(std::string_view subject, std::vector<Span>& matches) const {
  if (regex_) return regex_->find_all(subject, matches);
  if (literal_.empty()) return Status::ok();
  size_t pos = 0;
  while ((pos = subject.find(literal_, pos)) != std::string_view::npos) {
    matches.emplace_back(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos + literal_.size()));
    pos += literal_.size();
  }
  return Status::ok();
}

Status Pattern::replace_all(std::string& text, std::string_view content) const {
  std::vector<Span> matches;
  PAGELLM_RETURN_IF_ERROR(find_all(text, matches));
  if (matches.empty()) return Status::ok();
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text, prev, begin - prev);
    out.append(content);
    prev = end;
  }
  out.append(text, prev, std::string::npos);
  text = std::move(out);
  return Status::ok();
}

}  // namespace pagellm
