// `pagellm serve --speculative-config` (n-gram) through the OpenAI API: greedy completions and
// stop strings give the tokens and text of a server without speculation (the qwen3 fixture's
// checkpoint with the real tokenizer), and /metrics carries vLLM's vllm:spec_decode_* counters.
#include <thread>

#include <gtest/gtest.h>

#include "http_test_client.h"
#include "serve_process.h"

namespace pagellm::e2e {
namespace {

using nlohmann::json;

const char* const kNgram = R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1})";

json complete(int port, const json& body) {
  const HttpResult result = http_post_json(port, "/v1/completions", body);
  EXPECT_EQ(result.status, 200) << result.body;
  return result.status == 200 ? json::parse(result.body) : json::object();
}

TEST(ServeSpeculativeTest, SameCompletionsAsWithoutItAndSpecDecodeMetrics) {
  ServeProcess plain;
  ServeProcess speculative({"--speculative-config", kNgram});
  ASSERT_TRUE(plain.ready()) << plain.log();
  ASSERT_TRUE(speculative.ready()) << speculative.log();
  const json prompts = json::array({"one two three one two three one two", "a b a b a b a b a b", "Hello, hello, hello"});
  for (const auto& prompt : prompts) {
    for (const bool with_stop : {false, true}) {
      json body = {{"model", kModelName}, {"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0},
                   {"ignore_eos", true}, {"logprobs", 1}};
      if (with_stop) {
        // A stop string cut from the middle of the plain answer: both servers stop at the same place.
        const std::string text = complete(plain.port(), body)["choices"][0]["text"];
        ASSERT_GT(text.size(), 12u);
        body["stop"] = json::array({text.substr(text.size() / 2, 3)});
      }
      const json want = complete(plain.port(), body);
      const json got = complete(speculative.port(), body);
      EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]) << prompt << (with_stop ? " (stop)" : "");
      EXPECT_EQ(got["choices"][0]["finish_reason"], want["choices"][0]["finish_reason"]);
      EXPECT_EQ(got["usage"]["completion_tokens"], want["usage"]["completion_tokens"]);
      EXPECT_EQ(got["choices"][0]["logprobs"]["tokens"], want["choices"][0]["logprobs"]["tokens"]);
    }
  }
  const std::string labels = "{model_name=\"" + std::string(kModelName) + "\",engine=\"0\"";
  const std::string text = http_get(speculative.port(), "/metrics").body;
  const double drafts = metric_value(text, "vllm:spec_decode_num_drafts_total" + labels).value_or(-1);
  const double draft_tokens = metric_value(text, "vllm:spec_decode_num_draft_tokens_total" + labels).value_or(-1);
  const double accepted = metric_value(text, "vllm:spec_decode_num_accepted_tokens_total" + labels).value_or(-1);
  EXPECT_GT(drafts, 0);
  EXPECT_GE(draft_tokens, drafts);
  EXPECT_GT(accepted, 0);
  EXPECT_LE(accepted, draft_tokens);
  double per_position_sum = 0;
  for (int position = 0; position < 3; ++position) {
    const auto value = metric_value(text, "vllm:spec_decode_num_accepted_tokens_per_pos_total" + labels +
                                              ",position=\"" + std::to_string(position) + "\"}");
    ASSERT_TRUE(value.has_value()) << position;
    per_position_sum += *value;
  }
  EXPECT_EQ(per_position_sum, accepted);
  // Off by default: no spec_decode family at all.
  EXPECT_EQ(http_get(plain.port(), "/metrics").body.find("spec_decode"), std::string::npos);
}

}  // namespace
}  // namespace pagellm::e2e
