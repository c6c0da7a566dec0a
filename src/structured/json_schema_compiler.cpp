#include "structured/json_schema_compiler.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "structured/codepoint_set.h"
#include "structured/grammar_builder.h"
#include "structured/json_primitives.h"
#include "structured/regex_compiler.h"

namespace pagellm::structured {

namespace {

using json = nlohmann::ordered_json;
using Expr = GrammarBuilder::Expr;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",    "description", "examples",  "default",  "$schema",
                                          "$id",      "$comment",    "deprecated", "readOnly", "writeOnly",
                                          "$defs",    "definitions", "format"};
  return k;
}

const std::set<std::string>& constraint_keywords() {
  static const std::set<std::string> k = {
      "type",     "properties", "required",  "additionalProperties", "items",   "prefixItems",
      "minItems", "maxItems",   "enum",      "const",                "minLength", "maxLength",
      "pattern",  "anyOf",      "oneOf",     "allOf",                "$ref",    "nullable",
      "minimum",  "maximum",    "exclusiveMinimum", "exclusiveMaximum", "uniqueItems"};
  return k;
}

// Regexes for the formats we enforce (others are annotations).
const std::map<std::string, std::string>& format_patterns() {
  static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::map<std::string, std::string> k = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
      {"email", R"([a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63})*\.[a-zA-Z]{2,24})"},
  };
  return k;
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root), prims_(b_) {}

  Expected<Grammar> compile() {
    PAGELLM_ASSIGN_OR_RETURN(Expr body, schema(root_, "#"));
    return b_.build(b_.add_rule("root", body));
  }

 private:
  Status unsupported(const std::string& keyword, const std::string& path, const std::string& why = "") {
    return invalid_argument("[structured] unsupported JSON Schema keyword '{}' at {}{}", keyword, path,
                            why.empty() ? "" : " (" + why + ")");
  }

  // Every schema becomes a rule, so that a reused sub-schema is one reference, not a copy.
  Expected<Expr> schema(const json& s, const std::string& path) {
    PAGELLM_ASSIGN_OR_RETURN(Expr body, schema_body(s, path));
    return b_.ref(b_.add_rule("s" + std::to_string(b_.num_rules()), body));
  }

  Expected<Expr> schema_body(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return prims_.any_value();
      return invalid_argument("[structured] schema 'false' at {} allows no value", path);
    }
    if (!s.is_object()) return invalid_argument("[structured] schema at {} is not an object or boolean", path);
    for (const auto& [key, value] : s.items()) {
      if (!annotation_keywords().count(key) && !constraint_keywords().count(key)) return unsupported(key, path);
    }
    if (s.contains("nullable") && s["nullable"] == true) {
      json inner = s;
      inner.erase("nullable");
      PAGELLM_ASSIGN_OR_RETURN(Expr value, schema(inner, path));
      return b_.alt({value, prims_.null()});
    }
    for (const char* combinator : {"$ref", "anyOf", "oneOf", "allOf"}) {
      if (!s.contains(combinator)) continue;
      for (const auto& [key, value] : s.items()) {  // a combinator stands alone (besides annotations)
        if (key != combinator && !annotation_keywords().count(key) && key != "nullable") {
          return unsupported(key, path, std::string("next to '") + combinator + "'");
        }
      }
      if (std::string(combinator) == "$ref") return reference(s["$ref"], path);
      return combination(combinator, s[combinator], path);
    }
    if (s.contains("const")) return b_.literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return invalid_argument("[structured] 'enum' at {} is not an array", path);
      std::vector<Expr> values;
      for (const auto& v : s["enum"]) values.push_back(b_.literal(v.dump()));
      if (values.empty()) return invalid_argument("[structured] empty 'enum' at {} allows no value", path);
      return b_.alt(std::move(values));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else if (s["type"].is_array()) {
        for (const auto& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "?");
      }
    } else {
      types.push_back(inferred_type(s));
    }
    std::vector<Expr> branches;
    for (const auto& type : types) {
      PAGELLM_ASSIGN_OR_RETURN(Expr branch, typed(type, s, path));
      branches.push_back(branch);
    }
    if (branches.empty()) return invalid_argument("[structured] empty 'type' at {} allows no value", path);
    return b_.alt(std::move(branches));
  }

  static std::string inferred_type(const json& s) {
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) return "object";
    if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) {
      return "array";
    }
    if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength")) return "string";
    if (s.contains("minimum") || s.contains("maximum")) return "number";
    return "any";
  }

  Expected<Expr> typed(const std::string& type, const json& s, const std::string& path) {
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    if (type == "string") return string(s, path);
    if (type == "integer" || type == "number") return numeric(type == "integer", s, path);
    if (type == "boolean") return prims_.boolean();
    if (type == "null") return prims_.null();
    if (type == "any") return prims_.any_value();
    return invalid_argument("[structured] unknown JSON Schema type '{}' at {}", type, path);
  }

  Expected<Expr> reference(const json& ref, const std::string& path) {
    if (!ref.is_string()) return invalid_argument("[structured] '$ref' at {} is not a string", path);
    const std::string target = ref.get<std::string>();
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return b_.ref(it->second);
    if (target.empty() || target[0] != '#') {
      return invalid_argument("[structured] $ref '{}' at {}: only local references (#...) are supported", target,
                              path);
    }
    const json* resolved = nullptr;
    try {
      resolved = &root_.at(json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      return invalid_argument("[structured] $ref '{}' at {} does not resolve", target, path);
    }
    const int32_t rule = b_.declare_rule("ref" + std::to_string(ref_rules_.size()));
    ref_rules_[target] = rule;  // before compiling the target: it may refer to itself
    PAGELLM_ASSIGN_OR_RETURN(Expr body, schema(*resolved, target));
    b_.define_rule(rule, body);
    return b_.ref(rule);
  }

  Expected<Expr> combination(const std::string& keyword, const json& list, const std::string& path) {
    if (!list.is_array() || list.empty()) {
      return invalid_argument("[structured] '{}' at {} must be a non-empty array", keyword, path);
    }
    if (keyword == "allOf" && list.size() > 1) {
      return unsupported("allOf", path, "only a single schema is supported");
    }
    std::vector<Expr> branches;
    for (size_t i = 0; i < list.size(); ++i) {
      PAGELLM_ASSIGN_OR_RETURN(Expr branch, schema(list[i], path + "/" + keyword + "/" + std::to_string(i)));
      branches.push_back(branch);
    }
    return b_.alt(std::move(branches));
  }

  Expected<std::optional<int>> count(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::optional<int>();
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return invalid_argument("[structured] '{}' at {} must be a non-negative integer", key, path);
    }
    if (v.get<int64_t>() > GrammarBuilder::kMaxRepetitionBound) {
      return invalid_argument("[structured] '{}' at {} is larger than the supported {}", key, path,
                              GrammarBuilder::kMaxRepetitionBound);
    }
    return std::optional<int>(static_cast<int>(v.get<int64_t>()));
  }

  Expected<Expr> object(const json& s, const std::string& path);
  Expected<Expr> array(const json& s, const std::string& path);
  Expected<Expr> string(const json& s, const std::string& path);
  Expected<Expr> numeric(bool integer_only, const json& s, const std::string& path);

  const json& root_;
  GrammarBuilder b_;
  JsonPrimitives prims_;
  std::map<std::string, int32_t> ref_rules_;
};

Expected<Expr> SchemaCompiler::object(const json& s, const std::string& path) {
  struct Property {
    std::string name;
    Expr value;
    bool required;
  };
  std::set<std::string> required;
  if (s.contains("required")) {
    for (const auto& r : s["required"]) {
      if (!r.is_string()) return invalid_argument("[structured] 'required' at {} must list strings", path);
      required.insert(r.get<std::string>());
    }
  }
  std::vector<Property> props;
  std::set<std::string> declared;
  if (s.contains("properties")) {
    for (const auto& [name, sub] : s["properties"].items()) {
      PAGELLM_ASSIGN_OR_RETURN(Expr value, schema(sub, path + "/properties/" + name));
      props.push_back({name, value, required.count(name) > 0});
      declared.insert(name);
    }
  }
  for (const auto& name : required) {  // required but not described: any value
    if (!declared.count(name)) props.push_back({name, prims_.any_value(), true});
  }
  std::optional<Expr> extra_value;  // additionalProperties; absent = false (strict)
  if (s.contains("additionalProperties") && !(s["additionalProperties"].is_boolean() &&
                                              !s["additionalProperties"].get<bool>())) {
    PAGELLM_ASSIGN_OR_RETURN(Expr v, schema(s["additionalProperties"], path + "/additionalProperties"));
    extra_value = v;
  }
  // first[i] / rest[i]: properties from i on, with no property written yet / after one (comma).
  const std::string prefix = "obj" + std::to_string(b_.num_rules());
  Expr first = b_.empty(), rest = b_.empty();
  if (extra_value) {
    std::vector<std::string> names;
    for (const auto& p : props) names.push_back(p.name);
    const int32_t key = b_.add_rule("key" + std::to_string(b_.num_rules()),
                                    names.empty() ? prims_.string() : prims_.string_not_in(names));
    auto member = [&] { return b_.seq({b_.ref(key), b_.byte(':'), *extra_value}); };
    rest = b_.star(b_.seq({b_.byte(','), member()}));
    first = b_.optional(b_.seq({member(), b_.star(b_.seq({b_.byte(','), member()}))}));
  }
  for (size_t i = props.size(); i-- > 0;) {
    const int32_t rest_rule = b_.add_rule(prefix + "_rest" + std::to_string(i + 1), rest);
    const int32_t first_rule = b_.add_rule(prefix + "_first" + std::to_string(i + 1), first);
    const Expr member = b_.seq({b_.literal(json(props[i].name).dump() + ":"), props[i].value});
    const Expr with_comma = b_.seq({b_.byte(','), member, b_.ref(rest_rule)});
    const Expr as_first = b_.seq({member, b_.ref(rest_rule)});
    rest = props[i].required ? with_comma : b_.alt({with_comma, b_.ref(rest_rule)});
    first = props[i].required ? as_first : b_.alt({as_first, b_.ref(first_rule)});
  }
  return b_.seq({b_.byte('{'), first, b_.byte('}')});
}

Expected<Expr> SchemaCompiler::array(const json& s, const std::string& path) {
  if (s.contains("uniqueItems") && s["uniqueItems"] != false) return unsupported("uniqueItems", path);
  std::vector<Expr> prefix;
  if (s.contains("prefixItems")) {
    for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
      PAGELLM_ASSIGN_OR_RETURN(Expr e, schema(s["prefixItems"][i], path + "/prefixItems/" + std::to_string(i)));
      prefix.push_back(e);
    }
  }
  PAGELLM_ASSIGN_OR_RETURN(auto min_items, count(s, "minItems", path));
  PAGELLM_ASSIGN_OR_RETURN(auto max_items, count(s, "maxItems", path));
  const int min = min_items.value_or(0);
  int max = max_items.value_or(GrammarBuilder::kUnbounded);
  std::optional<Expr> item;
  const json items = s.contains("items") ? s["items"] : json(prefix.empty());
  if (!(items.is_boolean() && !items.get<bool>())) {
    PAGELLM_ASSIGN_OR_RETURN(Expr e, schema(items, path + "/items"));
    item = e;
  } else if (max == GrammarBuilder::kUnbounded || max > static_cast<int>(prefix.size())) {
    max = static_cast<int>(prefix.size());
  }
  if (max != GrammarBuilder::kUnbounded && min > max) {
    return invalid_argument("[structured] array at {} cannot have between {} and {} items", path, min, max);
  }
  auto element = [&](int j) { return j < static_cast<int>(prefix.size()) ? prefix[static_cast<size_t>(j)] : *item; };
  auto separated = [&](int j, Expr e) { return j == 0 ? e : b_.seq({b_.byte(','), e}); };
  // Positions that are spelled out (prefix items and the required minimum), then a repeated tail.
  const int spelled = std::max(static_cast<int>(prefix.size()), min);
  Expr body = b_.empty();
  if (max == GrammarBuilder::kUnbounded || spelled < max) {
    const int tail_max = max == GrammarBuilder::kUnbounded ? max : max - spelled;
    if (spelled == 0) {
      const int more = tail_max == GrammarBuilder::kUnbounded ? tail_max : tail_max - 1;
      body = b_.optional(b_.seq({*item, b_.repeat(b_.seq({b_.byte(','), *item}), 0, more)}));
    } else {
      body = b_.repeat(b_.seq({b_.byte(','), *item}), 0, tail_max);
    }
  }
  for (int j = std::min(spelled, max == GrammarBuilder::kUnbounded ? spelled : max); j-- > 0;) {
    const Expr here = b_.seq({separated(j, element(j)), body});
    body = j >= min ? b_.optional(here) : here;
  }
  return b_.seq({b_.byte('['), body, b_.byte(']')});
}

Expected<Expr> SchemaCompiler::string(const json& s, const std::string& path) {
  PAGELLM_ASSIGN_OR_RETURN(auto min_length, count(s, "minLength", path));
  PAGELLM_ASSIGN_OR_RETURN(auto max_length, count(s, "maxLength", path));
  std::string pattern;
  bool search = false;  // JSON Schema's pattern matches anywhere in the string
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return invalid_argument("[structured] 'pattern' at {} is not a string", path);
    pattern = s["pattern"].get<std::string>();
    search = true;
  } else if (s.contains("format") && s["format"].is_string()) {
    if (auto it = format_patterns().find(s["format"].get<std::string>()); it != format_patterns().end()) {
      pattern = it->second;
    }
  }
  if (pattern.empty()) {
    return prims_.string_of_length(min_length.value_or(0), max_length.value_or(GrammarBuilder::kUnbounded));
  }
  if (min_length || max_length) return unsupported(min_length ? "minLength" : "maxLength", path, "with 'pattern'");
  PAGELLM_ASSIGN_OR_RETURN(RegexPiece piece, regex_expr(b_, pattern, /*json_string_mode=*/true));
  auto anything = [&] { return b_.star(codepoints_expr(b_, CodepointSet().complement(), true)); };
  std::vector<Expr> parts = {b_.byte('"')};
  if (search && !piece.anchored_start) parts.push_back(anything());
  parts.push_back(piece.expr);
  if (search && !piece.anchored_end) parts.push_back(anything());
  parts.push_back(b_.byte('"'));
  return b_.seq(std::move(parts));
}

Expected<Expr> SchemaCompiler::numeric(bool integer_only, const json& s, const std::string& path) {
  std::optional<int64_t> lo, hi;
  auto bound = [&](const char* key, bool lower, bool exclusive) -> Status {
    if (!s.contains(key)) return Status::ok();
    const json& v = s[key];
    if (v.is_boolean()) return unsupported(key, path, "draft-4 boolean form");
    if (!v.is_number()) return invalid_argument("[structured] '{}' at {} is not a number", key, path);
    const double x = v.get<double>();
    int64_t edge = static_cast<int64_t>(lower ? std::ceil(x) : std::floor(x));
    if (exclusive && static_cast<double>(edge) == x) edge += lower ? 1 : -1;
    auto& slot = lower ? lo : hi;
    slot = slot ? (lower ? std::max(*slot, edge) : std::min(*slot, edge)) : edge;
    return Status::ok();
  };
  PAGELLM_RETURN_IF_ERROR(bound("minimum", true, false));
  PAGELLM_RETURN_IF_ERROR(bound("exclusiveMinimum", true, true));
  PAGELLM_RETURN_IF_ERROR(bound("maximum", false, false));
  PAGELLM_RETURN_IF_ERROR(bound("exclusiveMaximum", false, true));
  if (lo && hi && *lo > *hi) {
    return invalid_argument("[structured] no {} at {} lies between the bounds", integer_only ? "integer" : "number",
                            path);
  }
  if (!lo && !hi) return integer_only ? prims_.integer() : prims_.number();
  return prims_.integer_in_range(lo, hi);
}

}  // namespace

Expected<Grammar> grammar_from_json_schema_value(const nlohmann::ordered_json& schema) {
  return SchemaCompiler(schema).compile();
}

Expected<Grammar> grammar_from_json_schema(std::string_view schema_text) {
  json schema;
  try {
    schema = json::parse(schema_text);
  } catch (const std::exception& e) {
    return invalid_argument("[structured] JSON schema is not valid JSON: {}", e.what());
  }
  return grammar_from_json_schema_value(schema);
}

Grammar grammar_for_any_json_object() {
  GrammarBuilder b;
  JsonPrimitives prims(b);
  auto grammar = b.build(b.add_rule("root", prims.any_object()));
  return std::move(grammar).value();
}

}  // namespace pagellm::structured
