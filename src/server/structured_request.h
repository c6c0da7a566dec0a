// The structured-output and logit_bias fields of a request, as OpenAI and vLLM spell them:
//   response_format {"type": "text" | "json_object" | "json_schema", "json_schema": {"schema", ...}}
//   structured_outputs {"json" | "regex" | "choice" | "grammar" | "json_object"}   (vLLM)
//   guided_json, guided_regex, guided_choice, guided_grammar                        (vLLM, older)
//   logit_bias {"<token id>": bias in [-100, 100]}
// At most one constraint per request (a second is a 400 naming it). The constraint is compiled
// against the model's vocabulary where the request is built (Engine::grammar_compiler()).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/openai_request.h"

namespace pagellm::server {

// Fills common.constraint / common.constraint_param and common.sampling.logit_bias from `body`.
std::optional<ApiError> read_structured_output(const nlohmann::ordered_json& body, CommonFields& common);

// tool_choice required / named: its JSON Schema (ChatRequest::guided_json_schema) as the constraint;
// a request that also asks for another constraint is a 400.
std::optional<ApiError> add_tool_choice_constraint(const std::optional<nlohmann::ordered_json>& schema,
                                                   CommonFields& common);

}  // namespace pagellm::server
