// libFuzzer harness for the OpenAI request parser of `pagellm serve`: arbitrary bytes are a request
// body, parsed as /v1/completions and as /v1/chat/completions. Any crash, sanitizer report, hang or
// leak is a bug; 400s are fine. Checks the invariant the parser exists for: whatever it accepts,
// with the output budget fit_max_tokens gives, passes SamplingParams::validate (the engine would
// otherwise answer a 400 without the field's name, or sample with a value it never checked).
//
// Not built by default: scripts/fuzz.sh openai_request (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/openai_request.h"

using namespace pagellm;
using namespace pagellm::server;

namespace {

constexpr int kMaxModelLen = 4096;

void check(bool ok) {
  if (!ok) std::abort();
}

void check_accepted(const CommonFields& common, int num_prompt_tokens) {
  int max_tokens = 0;
  if (fit_max_tokens(common, num_prompt_tokens, kMaxModelLen, max_tokens)) return;
  check(max_tokens >= 1 && num_prompt_tokens + max_tokens <= kMaxModelLen);
  SamplingParams sampling = common.sampling;
  sampling.max_tokens = max_tokens;
  check(sampling.validate().is_ok());
  check(common.n >= 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json json;
  if (parse_json_body(body, json)) return 0;
  ParseOptions options;
  options.served_model_name = "m";
  options.vocab_size = 1000;
  // Both routes read the same body; "model" is set so that the rest is reached.
  json["model"] = "m";
  CompletionRequest completion;
  if (!parse_completion_request(json, options, completion)) {
    check(completion.prompt_texts.empty() != completion.prompt_ids.empty());
    for (const auto& ids : completion.prompt_ids) {
      check(!check_token_ids(ids, options.vocab_size, "prompt").has_value());
      check_accepted(completion.common, static_cast<int>(ids.size()));
    }
    if (!completion.prompt_texts.empty()) check_accepted(completion.common, 1);
  }
  ChatRequest chat;
  if (!parse_chat_request(json, options, chat)) {
    check(chat.template_inputs.messages.is_array() && !chat.template_inputs.messages.empty());
    check_accepted(chat.common, 1);
  }
  return 0;
}
