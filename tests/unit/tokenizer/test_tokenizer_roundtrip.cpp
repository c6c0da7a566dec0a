// Properties over the whole corpus for the five real tokenizers: decode(encode(s)) gives s back
// (up to what the family's normalizer changes), and streaming through IncrementalDetokenizer
// gives exactly decode(ids) with every delta valid UTF-8 — also for random ids, which include
// partial characters and byte-fallback runs.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/detokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

class RoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTripTest, DecodeOfEncodeGivesTheTextBack) {
  auto tok = load_family(GetParam());
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << GetParam() << " missing: run scripts/setup.sh");
  int failures = 0;
  for (const auto& s : corpus()) {
    auto ids = tok->encode(s, false);
    ASSERT_TRUE(ids.has_value()) << ids.status().message();
    const std::string got = tok->decode(*ids, false);
    if (got != expected_round_trip(GetParam(), s) && ++failures <= 5) {
      ADD_FAILURE() << "'" << show(s) << "' decodes as '" << show(got) << "'";
    }
  }
  EXPECT_EQ(failures, 0);
}

// Streams `ids` one at a time; checks the invariants and returns the concatenated text.
std::string stream(std::shared_ptr<const Tokenizer> tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string text;
  for (int32_t id : ids) {
    const std::string delta = detok.feed(id);
    EXPECT_TRUE(utf8::is_valid(delta)) << "delta '" << show(delta) << "' is not valid UTF-8";
    text += delta;
  }
  const std::string rest = detok.finish();
  EXPECT_TRUE(utf8::is_valid(rest));
  return text + rest;
}

TEST_P(RoundTripTest, IncrementalDetokenizerMatchesDecodeOnCorpus) {
  auto tok = load_family(GetParam());
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << GetParam() << " missing: run scripts/setup.sh");
  int failures = 0;
  for (const auto& s : corpus()) {
    auto ids = tok->encode(s, true);
    ASSERT_TRUE(ids.has_value());
    for (bool skip : {false, true}) {
      const std::string want = tok->decode(*ids, skip);
      const std::string got = stream(tok, *ids, skip);
      if (got != want && ++failures <= 5) {
        ADD_FAILURE() << "skip=" << skip << " '" << show(s) << "'\n  streamed: '" << show(got)
                      << "'\n  decode:   '" << show(want) << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(RoundTripTest, IncrementalDetokenizerMatchesDecodeOnRandomIds) {
  auto tok = load_family(GetParam());
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << GetParam() << " missing: run scripts/setup.sh");
  std::mt19937 rng(1234);
  // Byte-ish tokens (the first few hundred ids hold single bytes / <0xHH> in these vocabularies)
  // mixed with arbitrary ids, specials included.
  std::uniform_int_distribution<int32_t> any_id(0, static_cast<int32_t>(tok->vocab_size() - 1));
  std::uniform_int_distribution<int32_t> low_id(0, 300);
  int failures = 0;
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) ids.push_back(rng() % 3 == 0 ? any_id(rng) : low_id(rng));
    for (bool skip : {false, true}) {
      const std::string want = tok->decode(ids, skip);
      const std::string got = stream(tok, ids, skip);
      if (got != want && ++failures <= 5) {
        ADD_FAILURE() << "skip=" << skip << " ids " << show_ids(ids) << "\n  streamed: '"
                      << show(got) << "'\n  decode:   '" << show(want) << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(RoundTripTest, SpecialTokensAreRecognizedAndSkippable) {
  auto tok = load_family(GetParam());
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << GetParam() << " missing: run scripts/setup.sh");
  ASSERT_TRUE(tok->eos_token_id().has_value()) << "eos_token of tokenizer_config.json not found";
  const int32_t eos = *tok->eos_token_id();
  EXPECT_TRUE(tok->is_special(eos));
  const std::string eos_text = tok->id_to_token(eos);
  auto ids = tok->encode("Hi" + eos_text + "there", false);
  ASSERT_TRUE(ids.has_value());
  EXPECT_NE(std::find(ids->begin(), ids->end(), eos), ids->end());
  EXPECT_EQ(tok->decode(*ids, false), expected_round_trip(GetParam(), "Hi" + eos_text + "there"));
  // Llama 2's Prepend normalizer puts a "▁" before "there" too (HF: "Hi there").
  EXPECT_EQ(tok->decode(*ids, true), GetParam() == "llama2" ? "Hi there" : "Hithere");
  EXPECT_EQ(tok->token_to_id(eos_text), eos);
}

INSTANTIATE_TEST_SUITE_P(Families, RoundTripTest, ::testing::ValuesIn(families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pagellm::test
