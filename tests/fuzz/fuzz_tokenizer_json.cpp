// libFuzzer harness for loading tokenizer.json from arbitrary bytes (mutations of the small valid
// files in tests/fuzz/corpus/tokenizer_json/). A file that loads is then used: a few fixed texts
// are encoded, decoded and streamed. Any crash, sanitizer report, hang, leak or out-of-memory is a
// bug; so is an error that is not one line starting with "[tokenizer] " (checked, abort).
// When the input contains a NUL byte, the part after it is a tokenizer_config.json.
//
// Not built by default; scripts/fuzz.sh builds and runs it. By hand, from the repository root:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     tests/fuzz/fuzz_tokenizer_json.cpp $(ls src/tokenizer/*.cpp | grep -v -e jinja_ -e chat_template) \
//     -lpcre2-8 -lutf8proc -lfmt -o /tmp/fuzz_tokenizer_json
//   cp -r tests/fuzz/corpus/tokenizer_json /tmp/corpus_json
//   /tmp/fuzz_tokenizer_json -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
//     -dict=tests/fuzz/tokenizer_json.dict /tmp/corpus_json
// (Debian 12: apt-get install -y clang libclang-rt-14-dev for the fuzzer runtime.)
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void check_error(const pagellm::Status& status) {
  const std::string& m = status.message();
  if (m.rfind("[tokenizer] ", 0) != 0 || m.find('\n') != std::string::npos ||
      m.find('\r') != std::string::npos) {
    std::fprintf(stderr, "INVARIANT BROKEN: error is not one '[tokenizer] ' line:\n%s\n", m.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string json = input, config;
  if (const size_t nul = input.find('\0'); nul != std::string::npos) {
    json = input.substr(0, nul);
    config = input.substr(nul + 1);
  }
  auto loaded = pagellm::Tokenizer::from_json_text(json, config);
  if (!loaded.has_value()) {
    check_error(loaded.status());
    return 0;
  }
  std::shared_ptr<const pagellm::Tokenizer> tok = *loaded;
  static const std::vector<std::string> kTexts = {
      "", "Hello world", " héllo  123 4567\n\n\tend ", "<s>a</s> <|im_start|>x", "日本語 🤖👋🏽 ",
      "a\xE2\x96\x81 b", std::string(300, 'a') + " " + std::string(100, ' ')};
  for (const auto& text : kTexts) {
    for (bool add_special : {false, true}) {
      auto ids = tok->encode(text, add_special);
      if (!ids.has_value()) {
        check_error(ids.status());
        continue;
      }
      std::vector<int32_t> all = *ids;
      all.push_back(-1);
      all.push_back(static_cast<int32_t>(tok->vocab_size()));
      for (bool skip : {false, true}) {
        const std::string full = tok->decode(all, skip);
        pagellm::IncrementalDetokenizer detok(tok, skip);
        std::string streamed;
        for (int32_t id : all) streamed += detok.feed(id);
        streamed += detok.finish();
        (void)full;
        (void)streamed;
      }
    }
  }
  // Every id's string and back.
  for (int64_t id = 0; id < tok->vocab_size() && id < 4096; ++id) {
    const std::string s = tok->id_to_token(static_cast<int32_t>(id));
    (void)tok->token_to_id(s);
    (void)tok->is_special(static_cast<int32_t>(id));
  }
  auto bad = tok->encode("ok\xC3(", false);
  if (bad.has_value()) {
    std::fprintf(stderr, "INVARIANT BROKEN: encode accepted invalid UTF-8\n");
    std::abort();
  }
  check_error(bad.status());
  return 0;
}
