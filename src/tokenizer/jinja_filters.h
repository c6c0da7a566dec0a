// jinja2's built-in filters and tests that chat templates use, with transformers' tojson
// (json.dumps keeping non-ASCII). Names not listed here are rejected when the template is parsed.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);
// Throws TemplateError as Python would for a call of `name(params...)` with these arguments.
void check_call(const std::string& name, const std::vector<std::string>& params, const CallArgs& call);

}  // namespace pagellm::jinja
