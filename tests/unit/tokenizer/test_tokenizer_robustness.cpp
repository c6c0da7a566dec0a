// Robustness of the tokenizer on inputs no one wrote by hand: seeded random text (valid and
// invalid UTF-8), very long inputs, malformed tokenizer.json files, and the regressions the fuzz
// harnesses of tests/fuzz/ found (scripts/fuzz.sh runs those).
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/detokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

using json = nlohmann::json;

// Random valid UTF-8 drawn from scripts that exercise every path: ASCII with controls and
// whitespace runs, Latin with combining marks (NFC changes them), Greek, Cyrillic, Arabic,
// Devanagari, CJK, Hangul (syllables and jamo), emoji with ZWJ and skin tones, the U+2581 metaspace,
// unusual spaces and astral symbols.
std::string random_text(std::mt19937& rng, size_t max_chars) {
  static const std::vector<std::pair<char32_t, char32_t>> kRanges = {
      {0x20, 0x7E}, {0x20, 0x7E}, {0x20, 0x7E}, {0x0, 0x1F},    {0x7F, 0xFF},    {0x100, 0x24F},
      {0x300, 0x36F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x600, 0x6FF}, {0x900, 0x97F}, {0x1100, 0x11FF},
      {0x2000, 0x206F}, {0x2580, 0x2582}, {0x3000, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},
      {0xFB00, 0xFB4F}, {0xFF00, 0xFFEF}, {0x1F300, 0x1F6FF}, {0x1F3FB, 0x1F3FF}, {0x200D, 0x200D},
      {0x10000, 0x10FFFF}};
  std::string out;
  const size_t n = rng() % (max_chars + 1);
  for (size_t i = 0; i < n; ++i) {
    const auto& [lo, hi] = kRanges[rng() % kRanges.size()];
    char32_t cp = lo + static_cast<char32_t>(rng() % (hi - lo + 1));
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    if (rng() % 8 == 0) {  // whitespace and digit runs
      out.append(1 + rng() % 5, " \n\t0"[rng() % 4]);
      continue;
    }
    utf8::append(out, cp);
  }
  return out;
}

void expect_one_line_error(const Status& st, const std::string& needle) {
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.message().rfind("[tokenizer] ", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << "'" << st.message() << "' lacks '" << needle << "'";
}

class RobustnessTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const Tokenizer> tok() {
    auto t = load_family(GetParam());
    if (!t) ADD_FAILURE() << "assets/tokenizers/" << GetParam() << " missing: run scripts/setup.sh";
    return t;
  }
};

TEST_P(RobustnessTest, RandomValidUtf8EncodesAndRoundTrips) {
  auto tok = this->tok();
  if (!tok) return;
  std::mt19937 rng(20240501);
  int failures = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string s = random_text(rng, round < 250 ? 24 : 400);
    ASSERT_TRUE(utf8::is_valid(s));
    for (bool add_special : {false, true}) {
      auto ids = tok->encode(s, add_special);
      ASSERT_TRUE(ids.has_value()) << "'" << show(s) << "': " << ids.status().message();
      for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < tok->vocab_size()) << id;
      if (add_special) continue;
      const std::string got = tok->decode(*ids, false);
      if (got != expected_round_trip(GetParam(), s) && ++failures <= 5) {
        ADD_FAILURE() << "'" << show(s) << "' decodes as '" << show(got) << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(RobustnessTest, InvalidUtf8IsAOneLineErrorNamingTheOffset) {
  auto tok = this->tok();
  if (!tok) return;
  // Each is invalid at its first byte: stray continuation, bytes never used, overlong, encoded
  // surrogate, past U+10FFFF, a lead byte followed by ASCII, and a sequence cut by the end.
  const std::vector<std::string> bad = {"\x80",         "\xFF",         "\xFE",     "\xC0\xAF",
                                        "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC3(", "\xE2\x82"};
  std::mt19937 rng(7);
  for (int round = 0; round < 64; ++round) {
    const std::string valid = random_text(rng, 12);
    // Insert at a character boundary.
    size_t at = rng() % (valid.size() + 1);
    while (at < valid.size() && (static_cast<unsigned char>(valid[at]) & 0xC0) == 0x80) ++at;
    const std::string& b = bad[round % bad.size()];
    const bool at_end = b == "\xE2\x82";
    const std::string s = at_end ? valid + b : valid.substr(0, at) + b + valid.substr(at);
    const size_t offset = at_end ? valid.size() : at;
    auto ids = tok->encode(s, round % 2 == 0);
    ASSERT_FALSE(ids.has_value()) << show(s);
    expect_one_line_error(ids.status(), "not valid UTF-8");
    expect_one_line_error(ids.status(), "at offset " + std::to_string(offset));
  }
}

// Encoding is linear: 4x the text must not cost anywhere near 16x (quadratic). Timing the best of
// a few runs; the absolute bound is only a backstop for a very slow (sanitizer) build.
double best_seconds(const Tokenizer& tok, const std::string& text, int runs, size_t* num_ids) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok.encode(text, false);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(ids.has_value());
    if (ids.has_value()) *num_ids = ids->size();
  }
  return best;
}

TEST_P(RobustnessTest, LongRunsOfOneCharacterAreLinear) {
  auto tok = this->tok();
  if (!tok) return;
  struct Case {
    std::string unit;
    size_t count;
  };
  // 1 MB of 'a' (one pre-tokenizer word), 100k spaces, 100k newlines, 300 kB of U+4E2D.
  for (const Case& c : {Case{"a", 1'000'000}, Case{" ", 100'000}, Case{"\n", 100'000}, Case{"\xE4\xB8\xAD", 100'000}}) {
    std::string big, small;
    for (size_t i = 0; i < c.count; ++i) big += c.unit;
    for (size_t i = 0; i < c.count / 4; ++i) small += c.unit;
    size_t n_big = 0, n_small = 0;
    const double t_small = best_seconds(*tok, small, 3, &n_small);
    const double t_big = best_seconds(*tok, big, 2, &n_big);
    EXPECT_LT(t_big, 20.0) << show(c.unit) << " x" << c.count;
    EXPECT_LT(t_big, 12.0 * std::max(t_small, 2e-3))
        << show(c.unit) << ": " << t_small << " s for x" << c.count / 4 << ", " << t_big << " s for x" << c.count;
    auto ids = tok->encode(big, false);
    ASSERT_TRUE(ids.has_value());
    // Streaming the ids back is linear too, and gives the text back.
    const auto t0 = std::chrono::steady_clock::now();
    IncrementalDetokenizer detok(tok, false);
    std::string streamed;
    for (int32_t id : *ids) streamed += detok.feed(id);
    streamed += detok.finish();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
    EXPECT_TRUE(streamed == expected_round_trip(GetParam(), big)) << show(c.unit) << " x" << c.count;
  }
}

TEST_P(RobustnessTest, UnknownIdsDoNotChangeStreamedText) {
  // Found by fuzz_tokenizer_encode (gemma3): an id outside the vocabulary between byte-fallback
  // tokens ended the byte run in the detokenizer's window, but decode() skips such ids and sees
  // one run, so the streamed text differed from decode(ids). Models' embedding tables are often
  // padded past the tokenizer's ids, so a model can emit such ids.
  auto tok = this->tok();
  if (!tok) return;
  const int32_t unknown = static_cast<int32_t>(tok->vocab_size()) + 7;
  std::vector<int32_t> ids = *tok->encode("ok \xE2\x82\xAC\xF0\x9F\x98\x80 \xE4\xB8\xAD", false);
  for (int32_t id : {0, 1, 2, 3, 238, 428}) {  // byte-fallback tokens in the SentencePiece families
    if (tok->has_token(id)) ids.push_back(id);
  }
  for (size_t at = 0; at <= ids.size(); ++at) {
    std::vector<int32_t> with = ids;
    with.insert(with.begin() + static_cast<std::ptrdiff_t>(at), {unknown, -1});
    for (bool skip : {false, true}) {
      IncrementalDetokenizer detok(tok, skip);
      std::string streamed;
      for (int32_t id : with) streamed += detok.feed(id);
      streamed += detok.finish();
      EXPECT_EQ(streamed, tok->decode(with, skip)) << "unknown id at " << at;
      EXPECT_EQ(tok->decode(with, skip), tok->decode(ids, skip));
    }
  }
  EXPECT_FALSE(tok->has_token(unknown));
  EXPECT_FALSE(tok->has_token(-1));
}

INSTANTIATE_TEST_SUITE_P(Families, RobustnessTest, ::testing::ValuesIn(families()),
                         [](const auto& info) { return info.param; });

// A small valid tokenizer.json (a seed of the tokenizer.json fuzz harness) to break in many ways.
json seed(const std::string& name) {
  return read_json(source_path("tests/fuzz/corpus/tokenizer_json/" + name));
}

TEST(TokenizerJsonRobustness, FuzzSeedsLoadAndEncode) {
  for (const auto& entry : std::filesystem::directory_iterator(source_path("tests/fuzz/corpus/tokenizer_json"))) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string input = ss.str();
    const size_t nul = input.find('\0');
    auto tok = Tokenizer::from_json_text(input.substr(0, nul),
                                         nul == std::string::npos ? std::string() : input.substr(nul + 1));
    ASSERT_TRUE(tok.has_value()) << entry.path() << ": " << tok.status().message();
    auto ids = (*tok)->encode("Hello world abc 12 é", true);
    ASSERT_TRUE(ids.has_value()) << entry.path() << ": " << ids.status().message();
    EXPECT_FALSE(ids->empty()) << entry.path();
  }
}

TEST(TokenizerJsonRobustness, MalformedFilesAreOneLineErrors) {
  const std::string text = seed("byte_level_qwen3.json").dump();
  // Truncated anywhere.
  for (size_t cut : {size_t(0), size_t(1), size_t(17), text.size() / 3, text.size() / 2, text.size() - 1}) {
    expect_one_line_error(Tokenizer::from_json_text(text.substr(0, cut)).status(), "malformed JSON");
  }
  struct Case {
    std::string what;
    std::function<void(json&)> mutate;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"vocab is an array", [](json& j) { j["model"]["vocab"] = json::array({"a", "b"}); }, "\"vocab\" object"},
      {"vocab is missing", [](json& j) { j["model"].erase("vocab"); }, "\"vocab\" object"},
      {"vocab id is a string", [](json& j) { j["model"]["vocab"]["a"] = "1"; }, "integer id"},
      {"vocab id is a float", [](json& j) { j["model"]["vocab"]["a"] = 1.5; }, "integer id"},
      {"vocab id is negative", [](json& j) { j["model"]["vocab"]["a"] = -3; }, "out of range"},
      {"vocab id is huge", [](json& j) { j["model"]["vocab"]["a"] = 1LL << 40; }, "out of range"},
      {"merges is an object", [](json& j) { j["model"]["merges"] = json::object(); }, "\"merges\" array"},
      {"merge is a number", [](json& j) { j["model"]["merges"][0] = 7; }, "merge 0"},
      {"merge has three parts", [](json& j) { j["model"]["merges"][0] = json::array({"a", "b", "c"}); }, "merge 0"},
      {"merge string without space", [](json& j) { j["model"]["merges"][0] = "ab"; }, "merge 0"},
      {"merge names unknown token", [](json& j) { j["model"]["merges"].push_back(json::array({"h", "zzz"})); }, "not in the vocab"},
      {"merge result unknown", [](json& j) { j["model"]["merges"].push_back(json::array({"q", "q"})); }, "not in the vocab"},
      {"model is a string", [](json& j) { j["model"] = "BPE"; }, "\"model\" must be an object"},
      {"model type unknown", [](json& j) { j["model"]["type"] = "WordLevel"; }, "WordLevel"},
      {"unknown pre-tokenizer", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Punctuation"; }, "Punctuation"},
      {"pre-tokenizer without type", [](json& j) { j["pre_tokenizer"] = json::object(); }, "pre_tokenizer"},
      {"pre-tokenizer is a number", [](json& j) { j["pre_tokenizer"] = 3; }, "pre_tokenizer"},
      {"Sequence without list", [](json& j) { j["pre_tokenizer"].erase("pretokenizers"); }, "pretokenizers"},
      {"Split behavior unknown", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways"; }, "Split behavior"},
      {"Split pattern wrong type", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "x"; }, "pattern"},
      {"bad regex", [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "[a-"}}; }, "cannot compile regex"},
      {"use_regex not a bool", [](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "yes"; }, "malformed tokenizer.json"},
      {"unknown normalizer", [](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "Lowercase"},
      {"unknown decoder", [](json& j) { j["decoder"] = {{"type", "CTC"}}; }, "CTC"},
      {"unknown post-processor", [](json& j) { j["post_processor"] = {{"type", "Magic"}}; }, "Magic"},
      {"added_tokens is an object", [](json& j) { j["added_tokens"] = json::object(); }, "added_tokens"},
      {"added token without id", [](json& j) { j["added_tokens"][0].erase("id"); }, "integer \"id\""},
      {"added token id negative", [](json& j) { j["added_tokens"][0]["id"] = -1; }, "negative id"},
      {"added token id huge", [](json& j) { j["added_tokens"][0]["id"] = 1LL << 40; }, "out of range"},
      {"added token empty", [](json& j) { j["added_tokens"][0]["content"] = ""; }, "empty content"},
      {"added token flag wrong type", [](json& j) { j["added_tokens"][0]["special"] = "yes"; }, "malformed tokenizer.json"},
      {"template single is a string", [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", "$A"}};
       }, "\"single\" array"},
      {"template names unknown special", [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})},
                                {"special_tokens", json::object()}};
       }, "'<x>' has no ids"},
      {"template id is a number", [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", 5}}}}})}};
       }, "[tokenizer]"},
      {"template id outside the vocabulary", [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}, {{"Sequence", {{"id", "A"}}}}})},
                                {"special_tokens", {{"<x>", {{"id", "<x>"}, {"ids", {999999}}, {"tokens", {"<x>"}}}}}}};
       }, "post_processor id 999999 is not in the vocabulary"},
      {"template id is a huge float", [](json& j) {  // found by fuzz_tokenizer_json (UBSan)
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})},
                                {"special_tokens", {{"<x>", {{"id", "<x>"}, {"ids", {2.1e10}}}}}}};
       }, "post_processor token id 21000000000.0 is not a valid id"},
      {"template id is negative", [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"},
                                {"single", json::array({{{"SpecialToken", {{"id", "<x>"}}}}})},
                                {"special_tokens", {{"<x>", {{"id", "<x>"}, {"ids", {-2}}}}}}};
       }, "post_processor token id -2 is not a valid id"},
      {"Strip decoder count is a float", [](json& j) {
         j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1e30}, {"stop", 0}};
       }, "Strip decoder \"start\" must be a non-negative integer"},
      {"Roberta with short cls", [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", json::array({"<s>"})}, {"sep", json::array({"</s>", 2})}};
       }, "cls"},
      {"Roberta with string sep", [](json& j) {
         j["post_processor"] = {{"type", "RobertaProcessing"}, {"cls", json::array({"<s>", 1})}, {"sep", "</s>"}};
       }, "sep"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    json j = seed("byte_level_qwen3.json");
    c.mutate(j);
    expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), c.needle);
  }
}

TEST(TokenizerJsonRobustness, DeepNestingIsAnErrorNotAStackOverflow) {
  // Found reading the loaders for the fuzz harness (its inputs are too short): the loaders recurse into Sequence steps and nlohmann copies
  // recurse into values, so 100k nested Sequences (or a 100k-deep "behavior") overflowed the stack.
  const std::string text = seed("byte_level_qwen3.json").dump();
  const size_t depth = 100'000;
  std::string deep_normalizer;
  for (size_t i = 0; i < depth; ++i) deep_normalizer += R"({"type": "Sequence", "normalizers": [)";
  deep_normalizer += R"({"type": "NFC"})";
  for (size_t i = 0; i < depth; ++i) deep_normalizer += "]}";
  json j = seed("byte_level_qwen3.json");
  j["normalizer"] = "PLACEHOLDER";
  std::string s = j.dump();
  s.replace(s.find("\"PLACEHOLDER\""), 13, deep_normalizer);
  expect_one_line_error(Tokenizer::from_json_text(s).status(), "deeper than 64 levels");
  expect_one_line_error(Tokenizer::from_json_text(std::string(depth, '[') + std::string(depth, ']')).status(),
                        "deeper than 64 levels");
  // Brackets inside strings do not count; 60 levels are fine.
  j = seed("byte_level_qwen3.json");
  j["model"]["vocab"]["[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["] = 100000;
  json nested = json::array();
  for (int i = 0; i < 58; ++i) nested = json::array({nested});
  j["unused"] = nested;
  EXPECT_TRUE(Tokenizer::from_json_text(j.dump()).has_value());
}

TEST(TokenizerJsonRobustness, MetaspaceWithAnEmptyReplacementIsAnError) {
  // Found reading the loaders for the fuzz harness: an empty replacement made the pre-tokenizer
  // and the decoder loop forever (find("") never advances). HF requires one character.
  json j = seed("metaspace_digits.json");
  j["pre_tokenizer"]["pretokenizers"][1]["replacement"] = "";
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "replacement");
  j = seed("metaspace_digits.json");
  j["decoder"]["decoders"][1]["replacement"] = "";
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "replacement");
}

TEST(TokenizerJsonRobustness, NamesWithNewlinesStayOnOneLine) {
  json j = seed("byte_level_qwen3.json");
  j["model"]["vocab"]["bad\nkey"] = "x";
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "bad\\nkey");
  j = seed("byte_level_qwen3.json");
  j["normalizer"] = {{"type", "Lower\r\ncase"}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "Lower\\r\\ncase");
}

// The matcher as it was first written (find + quadratic hold-back): the reference for the KMP one.
struct NaiveStopMatcher {
  std::vector<std::string> stops;
  bool include;
  bool stopped = false;
  std::string pending;
  StopStringMatcher::Result feed(std::string_view delta) {
    StopStringMatcher::Result r;
    if (stopped) return r;
    pending.append(delta);
    size_t best_pos = std::string::npos;
    int best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      if (stops[i].empty()) continue;
      const size_t pos = pending.find(stops[i]);
      if (pos == std::string::npos) continue;
      if (pos < best_pos || (pos == best_pos && stops[i].size() > stops[best].size())) {
        best_pos = pos;
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) {
      r.text = pending.substr(0, best_pos) + (include ? stops[best] : "");
      r.stopped = stopped = true;
      r.stop_index = best;
      return r;
    }
    size_t hold = 0;
    for (const auto& stop : stops) {
      if (stop.empty()) continue;
      for (size_t len = std::min(stop.size() - 1, pending.size()); len > hold; --len) {
        if (pending.compare(pending.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
      }
    }
    r.text = pending.substr(0, pending.size() - hold);
    pending.erase(0, pending.size() - hold);
    return r;
  }
};

TEST(StopStringRobustness, SameAsTheNaiveMatcherOnRandomStreams) {
  std::mt19937 rng(99);
  auto random_ab = [&](size_t max_len) {
    std::string s(rng() % (max_len + 1), 'a');
    for (char& c : s) c = "aab"[rng() % 3];
    return s;
  };
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::string> stops(rng() % 4);
    for (auto& s : stops) s = random_ab(6);
    const bool include = rng() % 2;
    StopStringMatcher kmp(stops, include);
    NaiveStopMatcher naive{stops, include, false, ""};
    std::string log;
    for (int k = 0; k < 8; ++k) {
      const std::string delta = random_ab(5);
      log += "[" + delta + "]";
      const auto a = kmp.feed(delta);
      const auto b = naive.feed(delta);
      ASSERT_EQ(a.text, b.text) << log;
      ASSERT_EQ(a.stopped, b.stopped) << log;
      ASSERT_EQ(a.stop_index, b.stop_index) << log;
    }
    if (!naive.stopped) {
      EXPECT_EQ(kmp.finish(), naive.pending) << log;
    }
  }
}

TEST(StopStringRobustness, StopIndexCountsEmptyStopStrings) {
  // Found by fuzz_tokenizer_encode: empty stop strings are ignored, but stop_index must still
  // name the stop string in the caller's list.
  StopStringMatcher m({"", "END", "", "X"});
  auto r = m.feed("abX");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.stop_index, 3);
  StopStringMatcher m2({"", "END"});
  r = m2.feed("..END");
  EXPECT_EQ(r.stop_index, 1);
}

TEST(StopStringRobustness, LongStopStringsCostLinearTime) {
  // A stop string that makes every held-back length fail late: the old matcher spent
  // O(stop^2) per delta here (seconds per token for a 100 kB stop string).
  const std::string stop = std::string(50'000, 'a') + "b" + std::string(50'000, 'a');
  StopStringMatcher m({stop});
  const auto t0 = std::chrono::steady_clock::now();
  std::string out;
  for (int i = 0; i < 2'000; ++i) out += m.feed(std::string(64, 'a')).text;
  out += m.feed("c").text;
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(out.size() + m.finish().size(), 2'000u * 64 + 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  StopStringMatcher m2({stop});
  auto r = m2.feed(std::string(10, 'x') + stop.substr(0, 70'000));
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, std::string(10, 'x'));
  r = m2.feed(stop.substr(70'000) + "tail");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

}  // namespace
}  // namespace pagellm::test
