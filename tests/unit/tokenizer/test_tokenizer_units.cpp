// The tokenizer's parts on small hand-written tokenizer.json files, where the expected ids can be
// worked out by hand, plus the one-line errors of bad input.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

using json = nlohmann::json;

// A character-level BPE over {a, b, c, d, ▁} with merges ab, bc, abc, and the given extras.
json tiny_tokenizer() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", nullptr},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", false},
        {"vocab", {{"<unk>", 0}, {"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"ab", 5}, {"bc", 6},
                   {"abc", 7}, {"\xE2\x96\x81", 8}, {"\xE2\x96\x81" "a", 9}, {"<0x41>", 10},
                   {"<0xC3>", 11}, {"<0xA9>", 12}, {"<s>", 13}, {"</s>", 14}}},
        {"merges", json::array({"b c", "a b", "ab c", "\xE2\x96\x81 a"})}}},
  };
}

std::shared_ptr<const Tokenizer> make(const json& j) {
  auto tok = Tokenizer::from_json_text(j.dump());
  EXPECT_TRUE(tok.has_value()) << tok.status().message();
  return tok.has_value() ? *tok : nullptr;
}

std::vector<int32_t> enc(const Tokenizer& tok, const std::string& s, bool special = false) {
  auto ids = tok.encode(s, special);
  EXPECT_TRUE(ids.has_value()) << ids.status().message();
  return ids.has_value() ? *ids : std::vector<int32_t>{};
}

TEST(BpeModel, LowestRankMergeFirst) {
  auto tok = make(tiny_tokenizer());
  // "abc": ranks b c (0) < a b (1): a + bc, and there is no merge (a, bc).
  EXPECT_EQ(enc(*tok, "abc"), (std::vector<int32_t>{1, 6}));
  EXPECT_EQ(enc(*tok, "ab"), (std::vector<int32_t>{5}));
  EXPECT_EQ(enc(*tok, "abab"), (std::vector<int32_t>{5, 5}));
}

TEST(BpeModel, UnknownCharactersFuseIntoOneUnk) {
  auto tok = make(tiny_tokenizer());
  EXPECT_EQ(enc(*tok, "axyzb"), (std::vector<int32_t>{1, 0, 2}));
  json j = tiny_tokenizer();
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(enc(*make(j), "axyzb"), (std::vector<int32_t>{1, 0, 0, 0, 2}));
}

TEST(BpeModel, ByteFallbackUsesByteTokens) {
  json j = tiny_tokenizer();
  j["model"]["byte_fallback"] = true;
  auto tok = make(j);
  EXPECT_EQ(enc(*tok, "a\xC3\xA9"), (std::vector<int32_t>{1, 11, 12}));  // é -> <0xC3><0xA9>
  EXPECT_EQ(enc(*tok, "z"), (std::vector<int32_t>{0}));  // no <0x7A> token: unk
}

TEST(BpeModel, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json j = tiny_tokenizer();
  // Without ignore_merges "abc" is a + bc; with it, the vocab entry "abc" wins.
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(enc(*make(j), "abc"), (std::vector<int32_t>{7}));
}

TEST(BpeModel, LongWordsUseTheHeapPathWithTheSameResult) {
  auto tok = make(tiny_tokenizer());
  std::string word;
  std::vector<int32_t> want;
  for (int i = 0; i < 500; ++i) {
    word += "abc";
    want.push_back(1);
    want.push_back(6);
  }
  EXPECT_EQ(enc(*tok, word), want);
}

TEST(Normalizer, ReplaceAndPrependAsInSentencePieceConversions) {
  json j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                  {{"type", "Replace"},
                                                   {"pattern", {{"String", " "}}},
                                                   {"content", "\xE2\x96\x81"}}})}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"},
                                             {"pattern", {{"String", "\xE2\x96\x81"}}},
                                             {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  auto tok = make(j);
  EXPECT_EQ(enc(*tok, "a b"), (std::vector<int32_t>{9, 8, 2}));  // ▁a ▁ b
  EXPECT_EQ(tok->decode({9, 8, 2}, false), "a b");
  // Strip after Fuse removes the output's first space only: a window that starts mid-output (the
  // incremental detokenizer's) keeps it.
  const std::vector<int32_t> ab = {9, 8, 2};
  EXPECT_EQ(tok->decode_window(ab.data(), ab.size(), true), "a b");
  EXPECT_EQ(tok->decode_window(ab.data(), ab.size(), false), " a b");
  // Before a Fuse, Strip works on each token, wherever the window starts (as HF's decode_chain).
  j["decoder"]["decoders"] = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}},
                                          {{"type", "Fuse"}}});
  auto per_token = make(j);
  EXPECT_EQ(per_token->decode_window(ab.data(), ab.size(), false), "ab");
  EXPECT_EQ(per_token->decode(ab, false), "ab");
}

TEST(PreTokenizer, MetaspaceSplitsAndDecoderDropsTheFirstSpace) {
  json j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "always"}, {"split", true}};
  auto tok = make(j);
  EXPECT_EQ(enc(*tok, "a a"), (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(tok->decode({9, 9}, false), "a a");
  // Only the output's first token loses its space.
  EXPECT_EQ(tok->decode_window(std::vector<int32_t>{9, 9}.data(), 2, false), " a a");
}

TEST(PreTokenizer, SplitBehaviors) {
  auto ids_with = [](const std::string& behavior, bool invert) {
    json j = tiny_tokenizer();
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "b"}}}, {"behavior", behavior}, {"invert", invert}};
    return enc(*make(j), "abcab");
  };
  // Pieces: Isolated a|b|c|a|b; Removed a|c|a; MergedWithPrevious ab|cab; MergedWithNext a|bca|b.
  EXPECT_EQ(ids_with("Isolated", false), (std::vector<int32_t>{1, 2, 3, 1, 2}));
  EXPECT_EQ(ids_with("Removed", false), (std::vector<int32_t>{1, 3, 1}));
  EXPECT_EQ(ids_with("MergedWithPrevious", false), (std::vector<int32_t>{5, 3, 5}));
  EXPECT_EQ(ids_with("MergedWithNext", false), (std::vector<int32_t>{1, 6, 1, 2}));
  EXPECT_EQ(ids_with("Contiguous", false), (std::vector<int32_t>{1, 2, 3, 1, 2}));
  EXPECT_EQ(ids_with("Removed", true), (std::vector<int32_t>{2, 2}));
}

TEST(AddedTokens, LeftmostLongestAndStripOptions) {
  json j = tiny_tokenizer();
  j["added_tokens"] = json::array({
      {{"id", 13}, {"content", "<s>"}, {"special", true}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}, {"normalized", false}},
      {{"id", 14}, {"content", "</s>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}, {"single_word", false}, {"normalized", false}},
      {{"id", 7}, {"content", "abc"}, {"special", false}, {"lstrip", false}, {"rstrip", false}, {"single_word", true}, {"normalized", true}},
  });
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                                 {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}})},
                         {"pair", json::array()},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {13}}, {"tokens", {"<s>"}}}},
                                             {"</s>", {{"id", "</s>"}, {"ids", {14}}, {"tokens", {"</s>"}}}}}}};
  auto tok = make(j);
  EXPECT_EQ(enc(*tok, "a<s>b"), (std::vector<int32_t>{1, 13, 2}));
  // lstrip/rstrip: the spaces around </s> belong to it (no unk for them).
  EXPECT_EQ(enc(*tok, "a  </s>  b"), (std::vector<int32_t>{1, 14, 2}));
  // single_word: "abc" alone is the added token, inside "dabc" it is not.
  EXPECT_EQ(enc(*tok, "abc"), (std::vector<int32_t>{7}));
  EXPECT_EQ(enc(*tok, "dabc"), (std::vector<int32_t>{4, 1, 6}));
  EXPECT_EQ(enc(*tok, "ab", true), (std::vector<int32_t>{13, 5, 14}));
  EXPECT_EQ(tok->decode({13, 5, 14}, true), "ab");
  EXPECT_TRUE(tok->is_special(13));
  EXPECT_FALSE(tok->is_special(7));
}

TEST(Utf8, LossyConversionReplacesMaximalSubparts) {
  // As Rust's String::from_utf8_lossy: a truncated sequence is one U+FFFD, a stray byte one each.
  EXPECT_EQ(utf8::from_bytes_lossy("a\xE2\x82" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(utf8::from_bytes_lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::from_bytes_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::from_bytes_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8::from_bytes_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(utf8::incomplete_tail_length("ab\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail_length("ab\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail_length("\x80"), 0u);
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Regex, WhitespaceClassIsUnicodeWhiteSpaceLikeOniguruma) {
  auto re = Regex::compile("\\s+");
  ASSERT_TRUE(re.has_value());
  std::vector<Regex::Span> m;
  ASSERT_TRUE((*re)->find_all("a\xC2\x85" "b\xE1\xA0\x8E" "c\xE3\x80\x80" "d", m).is_ok());
  // U+0085 and U+3000 are White_Space; U+180E (PCRE2's \s would take it) is not.
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (Regex::Span{1, 3}));
  EXPECT_EQ(m[1], (Regex::Span{8, 11}));
  EXPECT_EQ(rewrite_whitespace_classes("[^\\s\\p{L}]"),
            "[^\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
            "\\x{202F}\\x{205F}\\x{3000}\\p{L}]");
}

TEST(Regex, VeryLongWordsDoNotOverflowTheJitStack) {
  auto re = Regex::compile("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(re.has_value());
  std::vector<Regex::Span> m;
  const std::string word(2'000'000, 'a');
  ASSERT_TRUE((*re)->find_all(word + "   " + word, m).is_ok());
  EXPECT_EQ(m.size(), 3u);
}

// Errors: one line, starting with "[tokenizer] ".
void expect_one_line_error(const Status& st, const std::string& needle) {
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.message().rfind("[tokenizer] ", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(TokenizerErrors, MissingFile) {
  auto tok = Tokenizer::from_file("/nonexistent/tokenizer.json");
  expect_one_line_error(tok.status(), "not found");
  EXPECT_EQ(tok.status().code(), StatusCode::kNotFound);
  expect_one_line_error(Tokenizer::from_dir("/nonexistent").status(), "not found");
}

TEST(TokenizerErrors, MalformedJson) {
  expect_one_line_error(Tokenizer::from_json_text("{\"model\": {").status(), "malformed JSON");
  expect_one_line_error(Tokenizer::from_json_text("[1, 2]").status(), "must be a JSON object");
  json j = tiny_tokenizer();
  j["model"]["vocab"]["a"] = "one";
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "integer id");
  j = tiny_tokenizer();
  j["model"]["merges"].push_back("a zz");
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "not in the vocab");
  expect_one_line_error(Tokenizer::from_json_text(tiny_tokenizer().dump(), "{oops").status(),
                        "tokenizer_config.json");
}

TEST(TokenizerErrors, UnsupportedFeaturesAreNamed) {
  json j = tiny_tokenizer();
  j["model"]["type"] = "Unigram";
  auto st = Tokenizer::from_json_text(j.dump()).status();
  expect_one_line_error(st, "Unigram");
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  j = tiny_tokenizer();
  j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "Precompiled");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "BertPreTokenizer");
  j = tiny_tokenizer();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "WordPiece");
  j = tiny_tokenizer();
  j["model"]["dropout"] = 0.1;
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "dropout");
  j = tiny_tokenizer();
  j["truncation"] = {{"max_length", 5}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "truncation");
  j = tiny_tokenizer();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_one_line_error(Tokenizer::from_json_text(j.dump()).status(), "cannot compile regex");
}

TEST(TokenizerErrors, InvalidUtf8Input) {
  auto tok = make(tiny_tokenizer());
  auto ids = tok->encode("ab\xC3(", false);
  expect_one_line_error(ids.status(), "not valid UTF-8");
  EXPECT_NE(ids.status().message().find("offset 2"), std::string::npos);
  EXPECT_FALSE(tok->encode("\xED\xA0\x80", false).has_value());  // encoded surrogate
}

TEST(TokenizerErrors, UnknownIdsAreSkippedWhenDecoding) {
  auto tok = make(tiny_tokenizer());
  EXPECT_EQ(tok->decode({1, 999, -5, 2}, false), "a b");  // no decoder: tokens joined by spaces
}

}  // namespace
}  // namespace pagellm::test
