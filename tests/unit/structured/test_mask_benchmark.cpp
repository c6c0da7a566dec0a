// Mask timings (printed, not asserted): the time fill_next_token_bitmask takes per generated
// token, for nested JSON schemas and json_object over real vocabularies, driven by random walks.
//   cold:    a fresh CompiledGrammar (first request with this schema: caches fill as it goes)
//   warming: the next 8 requests (different seeds, so some states are still new)
//   steady:  4 requests after those
//   suffix:  the same 4 requests without the whole-state cache (every mask rebuilt from the
//            per-suffix sets plus the run-time check of the uncertain tokens, xgrammar's path)
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "structured_test_util.h"

namespace pagellm::structured {
namespace {

const char* kOrderSchema = R"({
  "type": "object",
  "properties": {
    "order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"},
    "customer": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 24},
        "email": {"type": "string", "format": "email"},
        "vip": {"type": "boolean"}},
      "required": ["name", "email"]},
    "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "object", "properties": {
        "sku": {"type": "string", "maxLength": 10},
        "qty": {"type": "integer", "minimum": 1, "maximum": 99},
        "price": {"type": "number"},
        "options": {"type": "array", "items": {"enum": ["gift", "express", "fragile"]}, "maxItems": 2}},
      "required": ["sku", "qty", "price"]}},
    "status": {"enum": ["new", "paid", "shipped"]},
    "notes": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]}
  },
  "required": ["order_id", "customer", "items", "status"]
})";

struct Timing {
  double mask_us = 0, accept_us = 0;
  size_t tokens = 0, walks_stopped = 0;
};

void walk(GrammarMatcher& m, const TokenVocabulary& vocab, uint32_t seed, size_t max_tokens, Timing& t) {
  using clock = std::chrono::steady_clock;
  std::mt19937 rng(seed);
  std::vector<uint32_t> words(m.mask_words());
  std::vector<int32_t> ids;
  for (size_t n = 0; n < max_tokens; ++n) {
    const auto t0 = clock::now();
    m.fill_next_token_bitmask(words);
    const auto t1 = clock::now();
    t.mask_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    ids = test::allowed_ids(words, vocab.size());
    const int32_t id = ids[std::uniform_int_distribution<size_t>(0, ids.size() - 1)(rng)];
    const auto t2 = clock::now();
    ASSERT_TRUE(m.accept_token(id));
    t.accept_us += std::chrono::duration<double, std::micro>(clock::now() - t2).count();
    ++t.tokens;
    if (m.is_terminated()) {
      ++t.walks_stopped;
      return;
    }
  }
}

void report(const char* family, const char* schema, const char* mode, const Timing& t) {
  std::printf("[mask-bench] %-7s %-12s %-8s %6zu tokens  mask %8.1f us/token  accept %5.1f us/token\n", family,
              schema, mode, t.tokens, t.mask_us / static_cast<double>(t.tokens),
              t.accept_us / static_cast<double>(t.tokens));
}

class MaskBenchmark : public ::testing::TestWithParam<std::string> {};

TEST_P(MaskBenchmark, PerTokenMaskTimes) {
  REQUIRE_VOCAB(loaded, GetParam());
  const std::vector<std::pair<const char*, Constraint>> cases = {
      {"order-schema", {ConstraintKind::kJsonSchema, kOrderSchema}},
      {"json_object", {ConstraintKind::kJsonObject, ""}},
  };
  for (const auto& [name, constraint] : cases) {
    auto grammar = grammar_for(constraint);
    ASSERT_TRUE(grammar.has_value()) << grammar.status().message();
    auto compiled = std::make_shared<const CompiledGrammar>(std::move(grammar).value(), loaded.vocab);
    Timing cold, warming, steady, suffix;
    {
      GrammarMatcher m(compiled);
      walk(m, *loaded.vocab, 1, 600, cold);
    }
    for (uint32_t seed = 2; seed <= 9; ++seed) {
      GrammarMatcher m(compiled);
      walk(m, *loaded.vocab, seed, 600, warming);
    }
    for (uint32_t seed = 10; seed <= 13; ++seed) {
      GrammarMatcher m(compiled);
      walk(m, *loaded.vocab, seed, 600, steady);
    }
    for (uint32_t seed = 10; seed <= 13; ++seed) {
      GrammarMatcher m(compiled, /*use_state_cache=*/false);
      walk(m, *loaded.vocab, seed, 600, suffix);
    }
    report(GetParam().c_str(), name, "cold", cold);
    report(GetParam().c_str(), name, "warming", warming);
    report(GetParam().c_str(), name, "steady", steady);
    report(GetParam().c_str(), name, "suffix", suffix);
    const auto stats = compiled->cache_stats();
    std::printf("[mask-bench] %-7s %-12s caches: %zu suffixes, %zu states, %.1f MiB\n", GetParam().c_str(), name,
                stats.suffixes, stats.states, static_cast<double>(stats.bytes) / (1 << 20));
  }
}

// Gemma 3's 262k vocabulary is left out to keep the unit run short (it is covered by the walks).
INSTANTIATE_TEST_SUITE_P(Families, MaskBenchmark, ::testing::Values("qwen3", "llama3"));

}  // namespace
}  // namespace pagellm::structured
