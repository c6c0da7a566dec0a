// TokenVocabulary against the tokenizers' own decode: the bytes of a token sequence are exactly
// what decoding the sequence gives, special tokens are never text, and the sorted view is sorted.
#include <gtest/gtest.h>

#include <random>

#include "structured_test_util.h"
#include "tokenizer/utf8.h"

namespace pagellm::structured {
namespace {

class VocabularyFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabularyFamilies, BytesMatchTheTokenizersDecode) {
  REQUIRE_VOCAB(loaded, GetParam());
  const TokenVocabulary& vocab = *loaded.vocab;
  const Tokenizer& tok = *loaded.tokenizer;
  EXPECT_EQ(vocab.size(), tok.vocab_size());
  ASSERT_FALSE(vocab.stop_token_ids().empty());
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (tok.is_special(id)) EXPECT_FALSE(vocab.is_text(id)) << id;
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> pick(0, vocab.size() - 1);
  int compared = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int32_t> ids;
    std::string bytes;
    while (ids.size() < 6) {
      const int32_t id = pick(rng);
      if (!vocab.is_text(id)) continue;
      ids.push_back(id);
      bytes += vocab.token_bytes(id);
    }
    if (!utf8::is_valid(bytes)) continue;  // lossy decoding would differ by design
    EXPECT_EQ(bytes, tok.decode_window(ids.data(), ids.size(), /*at_start=*/false));
    ++compared;
  }
  EXPECT_GT(compared, 100);
  for (size_t i = 1; i < vocab.num_sorted(); ++i) ASSERT_LE(vocab.sorted_bytes(i - 1), vocab.sorted_bytes(i));
}

INSTANTIATE_TEST_SUITE_P(Families, VocabularyFamilies, ::testing::Values("qwen3", "llama3", "gemma3"));

}  // namespace
}  // namespace pagellm::structured
