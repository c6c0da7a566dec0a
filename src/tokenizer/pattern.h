// The "pattern" of tokenizer.json Split / Replace steps: {"String": "..."} (literal) or
// {"Regex": "..."} (Oniguruma syntax, run with PCRE2).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace pagellm {

class Pattern {
 public:
  using Span = Regex::Span;

  static Expected<Pattern> from_json(const nlohmann::json& config);
  static Pattern literal(std::string text);

  // Appends the non-overlapping matches in `subject`, left to right.
  Status find_all(std::string_view subject, std::vector<Span>& matches) const;
  // Replaces every match in `text` with `content`.
  Status replace_all(std::string& text, std::string_view content) const;

 private:
  std::string literal_;                  // used when regex_ is null
  std::shared_ptr<const Regex> regex_;
};

}  // namespace pagellm
