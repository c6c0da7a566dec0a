// Each constraint compiler, checked at the byte level: strings the grammar must accept and
// strings it must reject, and errors for what is not supported.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "structured/ebnf_compiler.h"
#include "structured/json_schema_compiler.h"
#include "structured/regex_compiler.h"
#include "structured/structured.h"

namespace pagellm::structured {
namespace {

void expect_language(const Expected<Grammar>& grammar, const std::vector<std::string>& accepted,
                     const std::vector<std::string>& rejected) {
  ASSERT_TRUE(grammar.has_value()) << grammar.status().message();
  for (const auto& text : accepted) EXPECT_TRUE(grammar->matches(text)) << "should accept: " << text;
  for (const auto& text : rejected) EXPECT_FALSE(grammar->matches(text)) << "should reject: " << text;
}

void expect_error(const Expected<Grammar>& grammar, const std::string& fragment) {
  ASSERT_FALSE(grammar.has_value()) << "compiled, but should fail with: " << fragment;
  EXPECT_NE(grammar.status().message().find(fragment), std::string::npos) << grammar.status().message();
}

TEST(RegexCompiler, LiteralsClassesAndQuantifiers) {
  expect_language(grammar_from_regex(R"(\d{3}-[a-c]+x?)"), {"123-a", "000-abcx", "999-cc"},
                  {"12-a", "123-", "123-ad", "1234-a", "123-ax x"});
  expect_language(grammar_from_regex("^(cat|dog)s?$"), {"cat", "dogs"}, {"cats!", "bird", ""});
  expect_language(grammar_from_regex(R"(\w+@\w+\.(com|org))"), {"a@b.com", "x_1@y.org"}, {"a@b.net", "@b.com"});
  expect_language(grammar_from_regex(R"([^a-z]{2,4})"), {"AB", "1234", "ÉÉ", "日本"}, {"A", "ab", "12345"});
  expect_language(grammar_from_regex(R"(a.c)"), {"abc", "a c", "aéc"}, {"a\nc", "ac"});
  expect_language(grammar_from_regex(R"(\s*\S\x41\u00e9)"), {"  xAé", "-Aé"}, {"xA", " Aé"});
  expect_language(grammar_from_regex(R"((ab){2,}|z{0})"), {"abab", "ababab", ""}, {"ab", "z"});
  expect_language(grammar_from_regex(R"([\]\-a]+)"), {"]-a", "a"}, {"b"});
}

TEST(RegexCompiler, UnsupportedFeaturesAreErrors) {
  expect_error(grammar_from_regex(R"((a)\1)"), "not supported");
  expect_error(grammar_from_regex(R"((?=a)a)"), "lookaround");
  expect_error(grammar_from_regex(R"(a\bb)"), "word boundaries");
  expect_error(grammar_from_regex(R"(a^b)"), "anchors");
  expect_error(grammar_from_regex(R"((ab)"), "missing ')'");
  expect_error(grammar_from_regex(R"([ab)"), "missing ']'");
}

TEST(EbnfCompiler, RulesGroupsAndRepetition) {
  const char* text = R"(
    # a tiny language
    root   ::= "let " name " = " value ";"
    name   ::= [a-z_] [a-z0-9_]*
    value  ::= number | list
    number ::= "-"? [0-9]{1,3}
    list   ::= "[" ( value ( ", " value )* )? "]"
  )";
  expect_language(grammar_from_ebnf(text), {"let x = 1;", "let a_1 = [1, -22, [3]];", "let y = [];"},
                  {"let x = 1", "let 1x = 1;", "let x = 1234;", "let x = [1,2];"});
  expect_language(grammar_from_ebnf("root ::= [^\"\\n]+ 'é' | \"\\x41\" .\n"), {"abé", "A\n", "Aé"}, {"é", "\"é"});
}

TEST(EbnfCompiler, ClearErrors) {
  expect_error(grammar_from_ebnf("start ::= \"a\""), "no 'root' rule");
  expect_error(grammar_from_ebnf("root ::= \"a\" missing"), "rule 'missing' is used but never defined");
  expect_error(grammar_from_ebnf("root ::= root \"a\" | \"b\""), "left-recursive");
  expect_error(grammar_from_ebnf("root ::= \"a\n"), "line 1 column");
  expect_error(grammar_from_ebnf("root ::= \"a\"\nroot ::= \"b\""), "defined twice");
  expect_error(grammar_from_ebnf("root ::= ( \"a\" "), "expected ')'");
  expect_error(grammar_from_ebnf("root = \"a\""), "expected '::='");
}

TEST(ChoiceCompiler, ExactlyOneChoice) {
  expect_language(grammar_from_choices({"yes", "no", "maybe so"}), {"yes", "no", "maybe so"},
                  {"ye", "yesno", "maybe", ""});
  expect_error(grammar_from_choices({}), "at least one");
}

TEST(JsonSchemaCompiler, ObjectsInSchemaOrderWithOptionalProperties) {
  const char* schema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"type":"string"}}},"required":["name"]})";
  expect_language(grammar_from_json_schema(schema),
                  {R"({"name":"a"})", R"({"name":"a","age":-3})", R"({"name":"","tags":["x","y"]})",
                   R"({"name":"é\n\"\u00e9\ud83d\ude00","age":0,"tags":[]})"},
                  {R"({"age":1})", R"({"age":1,"name":"a"})", R"({"name":"a", "age":1})", R"({"name":"a","x":1})",
                   R"({"name":"\ud83d"})", "{\"name\":\"a\nb\"}", R"({"name":"a","age":01})"});
}

TEST(JsonSchemaCompiler, AdditionalPropertiesEnumConstAndNullable) {
  expect_language(grammar_from_json_schema(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
                  {"{}", R"({"a":1,"b":2})"}, {R"({"a":"x"})"});
  expect_language(grammar_from_json_schema(R"({"properties":{"a":{"const":1}},"additionalProperties":true})"),
                  {"{}", R"({"a":1})", R"({"a":1,"z":[null]})"}, {R"({"a":1,"z":})", R"({"z":1,)", R"({"a":1,"a":2})", R"({"a":2})"});
  expect_language(grammar_from_json_schema(R"({"properties":{"é\"":{"type":"null"}},"additionalProperties":true})"),
                  {R"({"é\"":null,"é":1})", R"({"é\"x":1})", R"({"":1})"}, {R"({"é\"":1})", R"({"é\"":null,"é\"":1})"});
  expect_language(grammar_from_json_schema(R"({"enum":["red",1,null,{"k":[true]}]})"),
                  {R"("red")", "1", "null", R"({"k":[true]})"}, {R"("blue")", "true"});
  expect_language(grammar_from_json_schema(R"({"type":"string","nullable":true,"maxLength":2})"),
                  {"null", R"("ab")", R"("")"}, {R"("abc")"});
  expect_language(grammar_from_json_schema(R"({"type":["integer","boolean"]})"), {"12", "true"}, {"1.5", "\"x\""});
}

TEST(JsonSchemaCompiler, ArraysStringsAndNumbers) {
  expect_language(grammar_from_json_schema(R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})"),
                  {"[1]", "[1.5,-2e3,0]"}, {"[]", "[1,2,3,4]", "[1,]", "[01]"});
  expect_language(grammar_from_json_schema(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}]})"),
                  {"[]", R"(["a"])", R"(["a",1])"}, {R"([1])", R"(["a",1,2])"});
  expect_language(grammar_from_json_schema(R"({"type":"string","minLength":2,"maxLength":3})"),
                  {R"("ab")", R"("日本語")", R"("\n\t")"}, {R"("a")", R"("abcd")"});
  expect_language(grammar_from_json_schema(R"({"type":"string","pattern":"^[A-Z]{2}\\d$"})"), {R"("AB1")"},
                  {R"("AB12")", R"("ab1")"});
  expect_language(grammar_from_json_schema(R"({"type":"string","pattern":"x\""})"), {R"("x\"")", R"("ax\"b")"},
                  {R"("x")"});
  expect_language(grammar_from_json_schema(R"({"type":"integer","minimum":-15,"exclusiveMaximum":120})"),
                  {"-15", "-9", "0", "7", "99", "119"}, {"-16", "120", "200", "1000", "-0"});
  expect_language(grammar_from_json_schema(R"({"type":"integer","minimum":5})"), {"5", "9", "10", "123456"},
                  {"4", "0", "-1"});
  expect_language(grammar_from_json_schema(R"({"type":"string","format":"date"})"), {R"("2024-02-29")"},
                  {R"("2024-13-01")", R"("x")"});
}

TEST(JsonSchemaCompiler, RefsAndDefinitions) {
  const char* tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})";
  expect_language(grammar_from_json_schema(tree), {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"},
                  {R"({"v":1,"kids":[{}]})"});
  expect_language(grammar_from_json_schema(R"({"definitions":{"b":{"type":"boolean"}},
    "anyOf":[{"$ref":"#/definitions/b"},{"type":"null"}]})"), {"true", "null"}, {"1"});
}

TEST(JsonSchemaCompiler, UnsupportedKeywordsAreNamed) {
  expect_error(grammar_from_json_schema(R"({"type":"object","patternProperties":{}})"),
               "unsupported JSON Schema keyword 'patternProperties'");
  expect_error(grammar_from_json_schema(R"({"type":"number","multipleOf":2})"),
               "unsupported JSON Schema keyword 'multipleOf'");
  expect_error(grammar_from_json_schema(R"({"properties":{"x":{"not":{}}}})"),
               "unsupported JSON Schema keyword 'not' at #/properties/x");
  expect_error(grammar_from_json_schema(R"({"allOf":[{},{}]})"), "unsupported JSON Schema keyword 'allOf'");
  expect_error(grammar_from_json_schema(R"({"$ref":"http://x/y"})"), "only local references");
  expect_error(grammar_from_json_schema(R"({"type":"array","uniqueItems":true})"), "'uniqueItems'");
  expect_error(grammar_from_json_schema("{"), "not valid JSON");
  // Annotations are accepted.
  EXPECT_TRUE(grammar_from_json_schema(R"({"title":"t","description":"d","$schema":"x","examples":[1],
    "type":"string","format":"hostname","default":"a"})").has_value());
}

TEST(JsonObjectGrammar, AnyObject) {
  const Grammar g = grammar_for_any_json_object();
  for (const char* ok : {"{}", R"({"a":[1,{"b":null}],"c":"d"})", R"({"x":-1.5e+3})"}) EXPECT_TRUE(g.matches(ok)) << ok;
  for (const char* bad : {"[]", R"({"a":1,})", R"({ "a":1})", "1", R"({"a":tru})"}) EXPECT_FALSE(g.matches(bad)) << bad;
}

}  // namespace
}  // namespace pagellm::structured
