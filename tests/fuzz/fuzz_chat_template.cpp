// libFuzzer harness for the chat-template parser and interpreter: arbitrary bytes are a template
// rendered on a small conversation (with tools), plus, when the input splits at a NUL byte, the
// tail as a JSON messages array. Any crash, sanitizer report, hang or leak is a bug; errors are fine.
//
// Not built by default. Build and run (from the repository root):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
//     tests/fuzz/fuzz_chat_template.cpp src/tokenizer/jinja_*.cpp src/tokenizer/chat_template.cpp \
//     -lutf8proc -lfmt -o /tmp/fuzz_chat_template
//   mkdir -p /tmp/fuzz_corpus && python3 -c "import json,sys; [open(f'/tmp/fuzz_corpus/{f}','w').write(json.load(open(f'assets/tokenizers/{f}/tokenizer_config.json'))['chat_template']) for f in ['qwen3','llama3','gemma3','deepseek_v3']]"
//   /tmp/fuzz_chat_template -max_len=4096 -timeout=10 -rss_limit_mb=2048 /tmp/fuzz_corpus
// (Debian 12: apt-get install -y clang libclang-rt-14-dev for the fuzzer runtime.)
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  std::string source = input;
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "héllo"},
    {"role": "assistant", "content": "<think>r</think>ok", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "part"}]}
  ])");
  if (size_t nul = input.find('\0'); nul != std::string::npos) {
    source = input.substr(0, nul);
    auto parsed = nlohmann::ordered_json::parse(input.substr(nul + 1), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_array()) messages = std::move(parsed);
  }
  auto tmpl = pagellm::ChatTemplate::from_string(source, nlohmann::ordered_json{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (!tmpl.has_value()) return 0;
  pagellm::ChatTemplateInputs inputs;
  inputs.messages = std::move(messages);
  inputs.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  inputs.add_generation_prompt = true;
  inputs.extra_kwargs = {{"enable_thinking", false}};
  (void)tmpl->render(inputs);
  return 0;
}
