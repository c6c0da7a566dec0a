// Token ids of the five real tokenizers over tests/golden/tokenizer/corpus.json, compared with
// (1) Hugging Face `tokenizers` (hf_<family>.json, written by tools/hf_tokenizer_golden.py on a
// machine that has it: the contract), and (2) @lenml/tokenizers run by node right here
// (js_oracle.mjs: a second, independent implementation that CI always has).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tokenizer/detokenizer.h"
#include "tokenizer_test_util.h"

namespace pagellm::test {
namespace {

class OracleTest : public ::testing::TestWithParam<std::string> {};

// Runs js_oracle.mjs once per process into the build tree; "" when node or the package is missing.
std::string js_oracle_dir() {
  static std::string dir = [] {
    const std::string out = std::string(PAGELLM_BINARY_DIR) + "/tokenizer_js_oracle";
    if (!std::filesystem::exists(source_path("node_modules/@lenml/tokenizers"))) return std::string();
    const std::string corpus_path = source_path("tests/golden/tokenizer/corpus.json");
    bool fresh = true;
    for (const auto& family : families()) {
      const std::string file = out + "/js_" + family + ".json";
      if (!std::filesystem::exists(file) ||
          std::filesystem::last_write_time(file) < std::filesystem::last_write_time(corpus_path)) {
        fresh = false;
      }
    }
    if (fresh) return out;
    const std::string cmd = "node " + source_path("tests/golden/tokenizer/js_oracle.mjs") + " " +
                            corpus_path + " " + source_path("assets/tokenizers") + " " + out +
                            " > /dev/null";
    if (std::system(cmd.c_str()) != 0) return std::string();
    return out;
  }();
  return dir;
}

// JavaScript's \s is not Oniguruma's: it includes U+FEFF and leaves out U+0085 (NEL), so the
// families' split regexes cut text with those characters differently in @lenml/tokenizers than in
// HF tokenizers (whose Oniguruma \s is White_Space, what we implement). Such strings are left out
// of the JavaScript comparison only; the HF golden files cover them.
bool js_whitespace_differs(const std::string& s) {
  return s.find("\xC2\x85") != std::string::npos || s.find("\xEF\xBB\xBF") != std::string::npos;
}

// Compares our ids with an oracle's for every corpus string; returns the number of mismatches and
// prints the first few.
int compare_ids(const Tokenizer& tok, const nlohmann::json& expected, bool add_special,
                const std::string& label, bool skip_js_divergences = false) {
  const auto& strings = corpus();
  int mismatches = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    if (skip_js_divergences && js_whitespace_differs(strings[i])) continue;
    const auto want = expected[i].get<std::vector<int32_t>>();
    auto got = tok.encode(strings[i], add_special);
    if (got.has_value() && *got == want) continue;
    if (++mismatches <= 5) {
      ADD_FAILURE() << label << " string #" << i << " '" << show(strings[i]) << "'\n  ours:   "
                    << (got.has_value() ? show_ids(*got) : got.status().message())
                    << "\n  oracle: " << show_ids(want);
    }
  }
  return mismatches;
}

TEST_P(OracleTest, IdsMatchJavaScriptTokenizers) {
  const std::string family = GetParam();
  auto tok = load_family(family);
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << family << " missing: run scripts/setup.sh");
  const std::string dir = js_oracle_dir();
  if (dir.empty()) PAGELLM_SKIP_UNLESS_CI("node or node_modules/@lenml/tokenizers missing: run scripts/setup.sh");
  const auto oracle = read_json(dir + "/js_" + family + ".json");
  ASSERT_EQ(oracle["ids"].size(), corpus().size()) << "stale js oracle output in " << dir;
  const int plain = compare_ids(*tok, oracle["ids"], false, family + " (js, no special)", true);
  const int special = compare_ids(*tok, oracle["ids_special"], true, family + " (js, special)", true);
  EXPECT_EQ(plain, 0) << family << ": " << plain << " of " << corpus().size() << " strings differ";
  EXPECT_EQ(special, 0) << family << ": " << special << " of " << corpus().size() << " strings differ";
}

TEST_P(OracleTest, IdsAndTextMatchHuggingFaceTokenizers) {
  const std::string family = GetParam();
  auto tok = load_family(family);
  if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << family << " missing: run scripts/setup.sh");
  const std::string path = source_path("tests/golden/tokenizer/hf_" + family + ".json");
  if (!std::filesystem::exists(path)) {
    PAGELLM_SKIP_UNLESS_CI(path << " not present yet: run tools/hf_tokenizer_golden.py where HF tokenizers is installed");
  }
  const auto oracle = read_json(path);
  ASSERT_EQ(oracle["ids"].size(), corpus().size()) << "hf golden was written for another corpus";
  EXPECT_EQ(compare_ids(*tok, oracle["ids"], false, family + " (hf, no special)"), 0);
  EXPECT_EQ(compare_ids(*tok, oracle["ids_special"], true, family + " (hf, special)"), 0);
  int mismatches = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    const auto ids = oracle["ids_special"][i].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      const std::string want = oracle[skip ? "decode_skip_special" : "decode"][i].get<std::string>();
      const std::string got = tok->decode(ids, skip);
      if (got != want && ++mismatches <= 5) {
        ADD_FAILURE() << family << " decode(skip_special=" << skip << ") of string #" << i
                      << "\n  ours:   '" << show(got) << "'\n  oracle: '" << show(want) << "'";
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Random ids, as a model may emit them (runs of <0xHH> byte tokens that are and are not valid
// UTF-8, specials, anything), decoded by HF tokenizers: hf_<family>_random_decode.json, written by
// tools/hf_tokenizer_golden.py --random-decode for the families whose decoders have byte fallback.
// decode() and the incremental detokenizer must both give HF's text.
TEST(OracleRandomIds, DecodeAndStreamingMatchHuggingFace) {
  for (const std::string family : {"llama2", "gemma3"}) {
    auto tok = load_family(family);
    if (!tok) PAGELLM_SKIP_UNLESS_CI("assets/tokenizers/" << family << " missing: run scripts/setup.sh");
    const std::string path = source_path("tests/golden/tokenizer/hf_" + family + "_random_decode.json");
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto oracle = read_json(path);
    ASSERT_GE(oracle["ids"].size(), 1000u);
    int decode_mismatches = 0, stream_mismatches = 0;
    for (size_t i = 0; i < oracle["ids"].size(); ++i) {
      const auto ids = oracle["ids"][i].get<std::vector<int32_t>>();
      for (bool skip : {false, true}) {
        const std::string want = oracle[skip ? "decode_skip_special" : "decode"][i].get<std::string>();
        const std::string got = tok->decode(ids, skip);
        if (got != want && ++decode_mismatches <= 5) {
          ADD_FAILURE() << family << " decode(skip_special=" << skip << ") of " << show_ids(ids)
                        << "\n  ours:   '" << show(got) << "'\n  oracle: '" << show(want) << "'";
        }
        IncrementalDetokenizer detok(tok, skip);
        std::string streamed;
        for (int32_t id : ids) streamed += detok.feed(id);
        streamed += detok.finish();
        if (streamed != want && ++stream_mismatches <= 5) {
          ADD_FAILURE() << family << " streamed (skip_special=" << skip << ") " << show_ids(ids)
                        << "\n  ours:   '" << show(streamed) << "'\n  oracle: '" << show(want) << "'";
        }
      }
    }
    EXPECT_EQ(decode_mismatches, 0) << family;
    EXPECT_EQ(stream_mismatches, 0) << family;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OracleTest, ::testing::ValuesIn(families()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pagellm::test
