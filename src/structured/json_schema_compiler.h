// JSON Schema -> grammar, for response_format json_schema, guided_json and tool arguments.
//
// The grammar's sentences are compact JSON texts (no whitespace between tokens) that validate
// against the schema, with object properties in the schema's order. Supported keywords:
//   type (a name or a list), properties, required, additionalProperties (false, true or a
//   schema; ABSENT MEANS FALSE, as in OpenAI's strict mode and xgrammar's default), items
//   (schema or bool), prefixItems (absent items then means no further items), minItems,
//   maxItems, enum, const, minLength, maxLength, pattern (JSON Schema's search semantics:
//   unanchored sides allow any text), anyOf, oneOf (as anyOf: exclusivity is not enforced),
//   allOf with one schema, $ref to "#", "#/$defs/..", "#/definitions/.." or any local JSON
//   pointer (recursion allowed), $defs, definitions, nullable (OpenAPI), integer minimum /
//   maximum / exclusiveMinimum / exclusiveMaximum (exact), and the same bounds on "number"
//   (then only integer values inside the bounds are generated: valid, but narrower),
//   uniqueItems: false, format date / time / date-time / uuid / ipv4 / email (a common subset of
//   addresses) as patterns.
// Ignored, because they constrain nothing: title, description, examples, default, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, and other "format" values (an annotation by default
// in JSON Schema 2020-12).
// Anything else is an error: "[structured] unsupported JSON Schema keyword 'x' at <path>".
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagellm::structured {

// Parses the schema text itself so that property order survives (nlohmann::json sorts keys).
Expected<Grammar> grammar_from_json_schema(std::string_view schema_text);
Expected<Grammar> grammar_from_json_schema_value(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}).
Grammar grammar_for_any_json_object();

}  // namespace pagellm::structured
