// The matcher over real vocabularies: masks equal the brute-force answer (every token tried),
// random walks through the mask always end in text that parses and validates, stop tokens come
// only at complete states, and rollback restores masks exactly.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "structured/json_schema_compiler.h"
#include "structured_test_util.h"

namespace pagellm::structured {
namespace {

using test::allowed_ids;
using json = nlohmann::json;

std::shared_ptr<const CompiledGrammar> compile(const Constraint& c, std::shared_ptr<const TokenVocabulary> vocab) {
  auto grammar = grammar_for(c);
  EXPECT_TRUE(grammar.has_value()) << grammar.status().message();
  return std::make_shared<const CompiledGrammar>(std::move(grammar).value(), std::move(vocab));
}

std::vector<uint32_t> mask_of(GrammarMatcher& m) {
  std::vector<uint32_t> words(m.mask_words(), 0xFFFFFFFFu);
  m.fill_next_token_bitmask(words);
  return words;
}

// The mask must be exactly the set of tokens accept_token takes.
void expect_mask_is_exact(GrammarMatcher& m, const TokenVocabulary& vocab) {
  const std::vector<uint32_t> words = mask_of(m);
  size_t mismatches = 0;
  for (int32_t id = 0; id < vocab.size() && mismatches < 5; ++id) {
    const bool in_mask = (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1;
    const bool accepted = m.accept_token(id);
    if (accepted) m.rollback(1);
    if (in_mask != accepted) {
      ++mismatches;
      ADD_FAILURE() << "token " << id << " '" << vocab.token_bytes(id) << "' mask=" << in_mask
                    << " accept=" << accepted;
    }
  }
}

struct Walk {
  std::string text;
  bool stopped = false;
  size_t tokens = 0;
};

Walk random_walk(GrammarMatcher& m, const TokenVocabulary& vocab, uint32_t seed, size_t max_tokens) {
  std::mt19937 rng(seed);
  Walk walk;
  std::vector<uint32_t> words(m.mask_words());
  for (; walk.tokens < max_tokens; ++walk.tokens) {
    m.fill_next_token_bitmask(words);
    const auto ids = allowed_ids(words, vocab.size());
    if (ids.empty()) {
      ADD_FAILURE() << "empty mask after: " << walk.text;
      break;
    }
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    const bool complete_before = m.is_complete();
    EXPECT_TRUE(m.accept_token(id)) << "masked token refused: " << id;
    if (vocab.is_stop(id)) {
      EXPECT_TRUE(complete_before);
      walk.stopped = true;
      break;
    }
    walk.text += vocab.token_bytes(id);
  }
  return walk;
}

TEST(GrammarMatcher, SmallVocabularyMasksStopsAndRollback) {
  auto vocab = TokenVocabulary::from_strings({"{", "}", "\"", "a", "\"a", "\":", "1", "12", "2}", "<eos>", "", "a\""},
                                             {9});
  auto g = compile({ConstraintKind::kJsonSchema, R"({"properties":{"a":{"type":"integer"}},"required":["a"]})"}, vocab);
  GrammarMatcher m(g);
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{0}));
  EXPECT_FALSE(m.accept_token(9));  // no stop before the end
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{2, 4}));
  ASSERT_TRUE(m.accept_token(4));
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{2, 5}));
  ASSERT_TRUE(m.accept_token(5));
  ASSERT_TRUE(m.accept_token(6));
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{1, 6, 7, 8}));
  ASSERT_TRUE(m.accept_token(8));
  EXPECT_TRUE(m.is_complete());
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{9}));
  ASSERT_TRUE(m.accept_token(9));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(1));
  ASSERT_TRUE(m.rollback(3));  // back to {"a":
  EXPECT_EQ(allowed_ids(mask_of(m), vocab->size()), (std::vector<int32_t>{6, 7, 8}));
  EXPECT_FALSE(m.rollback(5));
  m.reset();
  EXPECT_EQ(m.num_accepted_tokens(), 0u);
}

const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 130},
    "email": {"type": "string", "format": "email"},
    "role": {"enum": ["admin", "user", "guest"]},
    "address": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 8},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["city"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3},
    "scores": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "boolean"}], "minItems": 1},
    "manager": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/ref"}]}
  },
  "required": ["name", "age", "role"],
  "$defs": {"ref": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}
})";

const char* kTreeSchema = R"({
  "$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer", "minimum": -9, "maximum": 9},
      "label": {"type": ["string", "null"], "maxLength": 5},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
    "required": ["v"]}},
  "$ref": "#/$defs/node"
})";

const char* kToolArgsSchema = R"({
  "type": "object",
  "properties": {
    "location": {"type": "string", "description": "City and state", "maxLength": 20},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "flags": {"type": "object", "additionalProperties": {"type": "boolean"}}
  },
  "required": ["location", "unit"],
  "additionalProperties": false
})";

class RandomWalks : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomWalks, JsonSchemaOutputsParseAndValidate) {
  REQUIRE_VOCAB(loaded, GetParam());
  for (const char* schema_text : {kPersonSchema, kTreeSchema, kToolArgsSchema}) {
    const json schema = json::parse(schema_text);
    auto g = compile({ConstraintKind::kJsonSchema, schema_text}, loaded.vocab);
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      GrammarMatcher m(g);
      const Walk walk = random_walk(m, *loaded.vocab, seed, 4000);
      if (!walk.stopped) continue;  // a walk may wander long inside free text; the finished ones must be right
      json value;
      ASSERT_NO_THROW(value = json::parse(walk.text)) << walk.text;
      EXPECT_EQ(test::validate(value, schema, schema), "") << walk.text;
      EXPECT_EQ(nlohmann::ordered_json::parse(walk.text).dump(), walk.text) << "output is not compact";
    }
  }
}

TEST_P(RandomWalks, OtherConstraintKinds) {
  REQUIRE_VOCAB(loaded, GetParam());
  const std::vector<std::pair<Constraint, std::string>> cases = {
      {{ConstraintKind::kRegex, R"((\+33|0)[1-9]( \d\d){4})"}, R"((\+33|0)[1-9]( \d\d){4})"},
      {{ConstraintKind::kChoice, "", {"positive", "negative", "neutral 😐"}}, "positive|negative|neutral 😐"},
      {{ConstraintKind::kGrammar, "root ::= \"SELECT \" col (\", \" col)* \";\"\ncol ::= [a-z]{1,4}"},
       "SELECT [a-z]{1,4}(, [a-z]{1,4})*;"},
  };
  for (const auto& [constraint, check] : cases) {
    auto g = compile(constraint, loaded.vocab);
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      GrammarMatcher m(g);
      const Walk walk = random_walk(m, *loaded.vocab, seed, 400);
      ASSERT_TRUE(walk.stopped) << walk.text;
      EXPECT_TRUE(std::regex_match(walk.text, std::regex(check))) << walk.text;
    }
  }
  auto g = compile({ConstraintKind::kJsonObject, ""}, loaded.vocab);
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    GrammarMatcher m(g);
    const Walk walk = random_walk(m, *loaded.vocab, seed, 3000);
    if (!walk.stopped) continue;
    json value;
    ASSERT_NO_THROW(value = json::parse(walk.text)) << walk.text;
    EXPECT_TRUE(value.is_object());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RandomWalks, ::testing::Values("qwen3", "llama3", "gemma3"));

TEST(GrammarMatcher, MasksEqualBruteForceOnQwen3) {
  REQUIRE_VOCAB(loaded, "qwen3");
  auto g = compile({ConstraintKind::kJsonSchema, kPersonSchema}, loaded.vocab);
  GrammarMatcher m(g);
  std::mt19937 rng(7);
  std::vector<uint32_t> words(m.mask_words());
  for (int step = 0; step < 24 && !m.is_terminated(); ++step) {
    if (step % 3 == 0) expect_mask_is_exact(m, *loaded.vocab);
    m.fill_next_token_bitmask(words);
    const auto ids = allowed_ids(words, loaded.vocab->size());
    ASSERT_FALSE(ids.empty());
    ASSERT_TRUE(m.accept_token(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]));
  }
}

TEST(GrammarMatcher, RollbackRestoresMasksExactly) {
  REQUIRE_VOCAB(loaded, "qwen3");
  auto g = compile({ConstraintKind::kJsonSchema, kTreeSchema}, loaded.vocab);
  GrammarMatcher m(g);
  std::mt19937 rng(3);
  std::vector<std::vector<uint32_t>> masks;
  for (int step = 0; step < 30 && !m.is_terminated(); ++step) {
    masks.push_back(mask_of(m));
    const auto ids = allowed_ids(masks.back(), loaded.vocab->size());
    ASSERT_TRUE(m.accept_token(ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)]));
  }
  const std::vector<uint32_t> first = masks.front();
  for (size_t back : {1u, 4u, 7u}) {  // masks[i] is the mask after i tokens
    std::vector<uint32_t> expected;
    for (size_t i = 0; i < back && !masks.empty(); ++i) {
      ASSERT_TRUE(m.rollback(1));
      expected = masks.back();
      masks.pop_back();
    }
    EXPECT_EQ(mask_of(m), expected);
  }
  // Undo everything at once as well.
  ASSERT_TRUE(m.rollback(m.num_accepted_tokens()));
  EXPECT_EQ(mask_of(m), first);
}

TEST(GrammarMatcher, StopTokensOnlyWhenComplete) {
  REQUIRE_VOCAB(loaded, "qwen3");
  const auto& vocab = *loaded.vocab;
  ASSERT_FALSE(vocab.stop_token_ids().empty());
  const int32_t stop = vocab.stop_token_ids()[0];
  auto g = compile({ConstraintKind::kJsonSchema, R"({"type":"integer"})"}, loaded.vocab);
  GrammarMatcher m(g);
  auto allowed = [&](int32_t id) { auto w = mask_of(m); return ((w[size_t(id) >> 5] >> (id & 31)) & 1) != 0; };
  EXPECT_FALSE(allowed(stop));
  EXPECT_FALSE(m.accept_token(stop));
  ASSERT_TRUE(m.accept_text("-4"));
  EXPECT_TRUE(allowed(stop));  // "-4" is complete, but more digits may follow
  EXPECT_TRUE(allowed(*loaded.tokenizer->token_to_id("2")));
  const auto special = loaded.tokenizer->token_to_id("<|im_start|>");
  ASSERT_TRUE(special.has_value());
  EXPECT_FALSE(allowed(*special));
  EXPECT_TRUE(m.accept_token(stop));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_EQ(allowed_ids(mask_of(m), vocab.size()), vocab.stop_token_ids());
}

TEST(GrammarMatcher, UnsupportedKeywordErrorNamesIt) {
  auto vocab = TokenVocabulary::from_strings({"a"}, {});
  GrammarCompiler compiler(vocab);
  auto compiled = compiler.compile({ConstraintKind::kJsonSchema, R"({"type":"object","minProperties":1})"});
  ASSERT_FALSE(compiled.has_value());
  EXPECT_EQ(compiled.status().message().rfind("[structured] unsupported JSON Schema keyword 'minProperties'", 0), 0u)
      << compiled.status().message();
  auto first = compiler.compile({ConstraintKind::kRegex, "a+"});
  auto second = compiler.compile({ConstraintKind::kRegex, "a+"});
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->get(), second->get());  // cached by constraint text
}

}  // namespace
}  // namespace pagellm::structured
