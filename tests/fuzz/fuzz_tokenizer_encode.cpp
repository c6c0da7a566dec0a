// libFuzzer harness for encoding and streaming decoding with one of the six real tokenizers.
// Each input is cut (FuzzedDataProvider) into option flags, up to 3 stop strings, a few raw ids and
// the text. The text, valid UTF-8 or not, is encoded; the ids (plus the raw ones, which may be
// unknown, special or byte-fallback) are decoded, streamed through IncrementalDetokenizer and the
// deltas through StopStringMatcher. Any crash, sanitizer report, hang or leak is a bug, and so is a
// broken invariant (checked below, abort with a message):
//   - encode of valid UTF-8 succeeds, with ids in [0, vocab_size); encode of invalid UTF-8 fails
//     with one line "[tokenizer] ..." naming the byte offset of the first invalid byte;
//   - decode(encode(s)) == s (NFC(s) for qwen3; U+2581 reads as a space for gemma3 and llama2,
//     which also puts a space after each added token that text follows), as HF does;
//   - decode output and every streamed delta are valid UTF-8, and the deltas + finish() == decode;
//   - stop strings: the emitted text is a prefix of the streamed text, holds no stop string, and
//     ends just before the stop string when one stopped the stream (else it is all the text).
//
// The family comes from the environment: PAGELLM_FUZZ_TOKENIZER=qwen3|llama3|gemma3|deepseek_v3|
// gptoss|llama2 (default qwen3), or a directory holding tokenizer.json. Run from the repository root
// after scripts/setup.sh (assets/tokenizers/). The tokenizer is loaded once per process.
//
// Not built by default; scripts/fuzz.sh builds and runs it (and the other harnesses). By hand:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     tests/fuzz/fuzz_tokenizer_encode.cpp $(ls src/tokenizer/*.cpp | grep -v -e jinja_ -e chat_template) \
//     -lpcre2-8 -lutf8proc -lfmt -o /tmp/fuzz_tokenizer_encode
//   PAGELLM_FUZZ_TOKENIZER=llama3 /tmp/fuzz_tokenizer_encode -max_len=2048 -timeout=10 \
//     -rss_limit_mb=4096 /tmp/corpus_encode tests/fuzz/corpus/tokenizer_encode
// (Debian 12: apt-get install -y clang libclang-rt-14-dev for the fuzzer runtime.)
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "../unit/tokenizer/round_trip.h"

namespace {

using pagellm::Tokenizer;

struct Loaded {
  std::string family;
  std::shared_ptr<const Tokenizer> tokenizer;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    const char* env = std::getenv("PAGELLM_FUZZ_TOKENIZER");
    std::string family = env && *env ? env : "qwen3";
    std::string dir = family;
    if (!std::filesystem::is_directory(dir)) dir = "assets/tokenizers/" + family;
    family = std::filesystem::path(dir).lexically_normal().filename().string();
    if (family.empty()) family = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
    auto tok = Tokenizer::from_dir(dir);
    if (!tok.has_value()) {
      std::fprintf(stderr, "fuzz_tokenizer_encode: cannot load '%s': %s\n", dir.c_str(),
                   tok.status().message().c_str());
      std::abort();
    }
    std::fprintf(stderr, "fuzz_tokenizer_encode: family %s from %s\n", family.c_str(), dir.c_str());
    return Loaded{family, *tok};
  }();
  return l;
}

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "INVARIANT BROKEN: %s\n%s\n", what, detail.c_str());
  std::abort();
}

void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) fail(what, detail);
}

bool is_one_line_tokenizer_error(const std::string& message) {
  return message.rfind("[tokenizer] ", 0) == 0 && message.find('\n') == std::string::npos;
}

}  // namespace

// Loads the tokenizer before fuzzing starts (seconds under the sanitizers; not a per-input timeout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)loaded();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Loaded& l = loaded();
  const Tokenizer& tok = *l.tokenizer;
  FuzzedDataProvider fdp(data, size);
  const uint8_t flags = fdp.ConsumeIntegral<uint8_t>();
  const bool add_special_tokens = flags & 1;
  const bool skip_special_tokens = flags & 2;
  const bool include_stop_string = flags & 4;
  std::vector<std::string> stops(fdp.ConsumeIntegralInRange<int>(0, 3));
  for (auto& s : stops) s = fdp.ConsumeRandomLengthString(12);
  std::vector<int32_t> raw_ids(fdp.ConsumeIntegralInRange<int>(0, 6));
  for (auto& id : raw_ids) {
    // Mostly real ids (byte-fallback and special ones live at both ends), sometimes anything.
    const uint8_t kind = fdp.ConsumeIntegral<uint8_t>();
    if (kind < 64) {
      id = fdp.ConsumeIntegralInRange<int32_t>(0, 300);
    } else if (kind < 128) {
      id = static_cast<int32_t>(tok.vocab_size() - 1 - fdp.ConsumeIntegralInRange<int32_t>(0, 300));
    } else if (kind < 240) {
      id = fdp.ConsumeIntegralInRange<int32_t>(0, static_cast<int32_t>(tok.vocab_size() - 1));
    } else {
      id = fdp.ConsumeIntegral<int32_t>();
    }
  }
  const std::string text = fdp.ConsumeRemainingBytesAsString();

  // Encode.
  std::vector<int32_t> ids;
  const size_t bad = pagellm::utf8::first_invalid_offset(text);
  auto encoded = tok.encode(text, add_special_tokens);
  if (bad != text.size()) {
    check(!encoded.has_value(), "encode accepted invalid UTF-8");
    const std::string& msg = encoded.status().message();
    check(is_one_line_tokenizer_error(msg), "invalid UTF-8 error is not one '[tokenizer] ' line", msg);
    check(msg.find("offset " + std::to_string(bad)) != std::string::npos,
          "invalid UTF-8 error does not name the offset", msg);
  } else {
    check(encoded.has_value(), "encode failed on valid UTF-8", encoded.status().message());
    ids = *encoded;
    for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size(), "encode gave an id out of range");
    const std::string decoded = tok.decode(ids, false);
    if (!add_special_tokens) {
      const std::string want = pagellm::test::expected_round_trip(l.family, text);
      check(decoded == want, "decode(encode(s)) != s", "got:  " + decoded + "\nwant: " + want);
    }
  }

  // Decode and stream the ids followed by the raw ones.
  ids.insert(ids.end(), raw_ids.begin(), raw_ids.end());
  const std::string full = tok.decode(ids, skip_special_tokens);
  check(pagellm::utf8::is_valid(full), "decode gave invalid UTF-8");
  pagellm::IncrementalDetokenizer detok(l.tokenizer, skip_special_tokens);
  pagellm::StopStringMatcher matcher(stops, include_stop_string);
  std::string streamed, emitted;
  int stop_index = -1;
  auto emit = [&](const std::string& delta) {
    check(pagellm::utf8::is_valid(delta), "detokenizer delta is not valid UTF-8");
    streamed += delta;
    if (stop_index >= 0) return;
    auto r = matcher.feed(delta);
    emitted += r.text;
    if (r.stopped) stop_index = r.stop_index;
  };
  for (int32_t id : ids) emit(detok.feed(id));
  emit(detok.finish());
  if (streamed != full) {
    std::string list;
    for (int32_t id : ids) list += std::to_string(id) + ",";
    fail("streamed deltas != decode(ids)", "ids: " + list + " skip_special_tokens: " +
                                               std::to_string(skip_special_tokens) + "\nstreamed: '" +
                                               streamed + "'\ndecode:   '" + full + "'");
  }
  if (stop_index < 0) emitted += matcher.finish();

  check(streamed.compare(0, emitted.size(), emitted) == 0, "stop matcher emitted text that was not streamed");
  if (stop_index < 0) {
    check(emitted == streamed, "stop matcher lost text without a stop");
    for (const auto& s : stops) {
      check(s.empty() || streamed.find(s) == std::string::npos, "stop string streamed but not found", s);
    }
  } else {
    check(stop_index < static_cast<int>(stops.size()), "stop index out of range");
    const std::string& stop = stops[static_cast<size_t>(stop_index)];
    std::string before = emitted;
    if (include_stop_string) {
      check(emitted.size() >= stop.size() && emitted.compare(emitted.size() - stop.size(), stop.size(), stop) == 0,
            "include_stop_string: output does not end with the stop string");
      before.resize(emitted.size() - stop.size());
    }
    check(streamed.compare(0, before.size() + stop.size(), before + stop) == 0,
          "output + stop string is not a prefix of the streamed text");
    for (const auto& s : stops) {
      check(s.empty() || before.find(s) == std::string::npos, "a stop string was emitted",
            "stop '" + s + "' in '" + before + "' (stopped by '" + stop + "')");
    }
  }
  return 0;
}
