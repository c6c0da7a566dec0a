// Renders a parsed template: statements write to an output string, expressions evaluate to
// Values. Scoping follows jinja2: each for-loop iteration and each macro call gets a fresh
// scope whose parent is where the loop/macro was written; `if` and `with`-less blocks do not.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_parser.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::jinja {

struct RenderLimits {
  int64_t max_output_bytes = 64 << 20;
  int64_t max_steps = 2'000'000;  // statements executed + loop iterations (real templates: ~50 per message)
  int max_call_depth = 64;         // nested macro calls (CPython's recursion limit bounds jinja2)
};

// Renders `tmpl` with `variables` (the render() keyword arguments) on top of the globals
// (range, namespace, dict, raise_exception, strftime_now). Throws TemplateError with position.
std::string render_template(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables,
                            const RenderLimits& limits = {});

}  // namespace pagellm::jinja
