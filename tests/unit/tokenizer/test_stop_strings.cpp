// Stop strings across token boundaries, alone and behind the incremental detokenizer.
#include <gtest/gtest.h>

#include "tokenizer/detokenizer.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

TEST(StopStringMatcher, HoldsBackPossiblePrefixesAndCutsAtTheStop) {
  StopStringMatcher m({"END"});
  auto r = m.feed("ab E");
  EXPECT_EQ(r.text, "ab ");
  EXPECT_FALSE(r.stopped);
  r = m.feed("N");
  EXPECT_EQ(r.text, "");
  r = m.feed("Dxyz");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 0);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.feed("more").text, "");
  EXPECT_EQ(m.finish(), "");
}

TEST(StopStringMatcher, ReleasesTextThatTurnsOutNotToBeAStop) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(m.feed("xE").text, "x");
  EXPECT_EQ(m.feed("Nd").text, "ENd");
  EXPECT_EQ(m.feed("EN").text, "");
  EXPECT_EQ(m.finish(), "EN");
}

TEST(StopStringMatcher, EarliestStopWinsAndCanBeIncluded) {
  StopStringMatcher m({"world", "lo w"}, /*include_stop_string=*/true);
  auto r = m.feed("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop_index, 1);
  EXPECT_EQ(r.text, "hello w");
}

TEST(StopStringMatcher, OverlappingPrefixesAndMultibyteText) {
  StopStringMatcher m({"ababc", "\xE4\xB8\xAD\xE6\x96\x87"});  // "中文"
  std::string out;
  for (const char* d : {"abab", "ab", "abc!"}) out += m.feed(d).text;
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "abab");
  StopStringMatcher m2({"\xE4\xB8\xAD\xE6\x96\x87"});
  EXPECT_EQ(m2.feed("x\xE4\xB8\xAD").text, "x");
  EXPECT_EQ(m2.feed("\xE5\x9B\xBD").text, "\xE4\xB8\xAD\xE5\x9B\xBD");
}

TEST(StopStringMatcher, EmptyStopStringsAreIgnored) {
  StopStringMatcher m({""});
  EXPECT_EQ(m.feed("abc").text, "abc");
  EXPECT_FALSE(m.stopped());
}

// Real tokens: the stop string spans several tokens and starts mid-token.
TEST(StopStringMatcher, AcrossRealTokenBoundaries) {
  for (const auto& family : families()) {
    auto tok = load_family(family);
    if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers missing: run scripts/setup.sh");
    const std::string text = "The answer is 42.\n\nObservation: the 東京 tower is tall. More text follows.";
    for (const std::string stop : {"Observation:", "bservation", "\n\n", "\xE4\xBA\xAC", "tall. More", "42"}) {
      auto ids = tok->encode(text, false);
      ASSERT_TRUE(ids.has_value());
      IncrementalDetokenizer detok(tok, true);
      StopStringMatcher matcher({stop});
      std::string out;
      for (int32_t id : *ids) {
        auto r = matcher.feed(detok.feed(id));
        out += r.text;
        if (r.stopped) break;
      }
      if (!matcher.stopped()) out += matcher.feed(detok.finish()).text;
      EXPECT_TRUE(matcher.stopped()) << family << " stop '" << stop << "'";
      const std::string decoded = tok->decode(*ids, true);
      EXPECT_EQ(out, decoded.substr(0, decoded.find(stop))) << family << " stop '" << stop << "'";
    }
  }
}

}  // namespace
}  // namespace pagellm::test
