// --dataset multi-turn against the scripted fake server: each turn resends the conversation's
// history with the server's actual answers, turns of one conversation never overlap, every turn
// of every conversation completes, and the report shows TTFT by turn.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/fake_openai_server.h"
#include "bench/multi_turn.h"
#include "bench/report.h"
#include "bench/serve_runner.h"

namespace pagellm::bench {
namespace {

constexpr int kOutputLen = 4;
const std::string kFakeAnswer = " tok tok tok tok";  // the fake's " tok" per token, kOutputLen tokens

std::unique_ptr<FakeOpenAiServer> start_fake() {
  FakeServerScript script;
  script.first_chunk_delay_ms = 5;
  script.token_interval_ms = 1;
  script.keep_request_bodies = true;
  auto server = FakeOpenAiServer::start(script);
  EXPECT_TRUE(server.has_value()) << server.status().message();
  return std::move(server).value();
}

ServeConfig config_for(const FakeOpenAiServer& server, Endpoint endpoint, int max_concurrency = 0) {
  ServeConfig config;
  config.base_url = parse_base_url(server.base_url()).value();
  config.request = {"fake-model", endpoint, true};
  config.max_concurrency = max_concurrency;
  config.show_progress = false;
  return config;
}

MultiTurnOptions options_for(Endpoint endpoint, int conversations, int turns) {
  MultiTurnOptions options;
  options.num_conversations = conversations;
  options.turns = turns;
  options.system_len = 8;
  options.input_len = 5;
  options.output_len = kOutputLen;
  options.endpoint = endpoint;
  return options;
}

struct MultiTurnRun {
  std::unique_ptr<MultiTurnConversations> conversations;
  RunResult result;
};

MultiTurnRun run_multi_turn(const FakeOpenAiServer& server, const MultiTurnOptions& options,
                            int max_concurrency = 0) {
  MultiTurnRun run;
  run.conversations = MultiTurnConversations::make(options, nullptr).value();
  run.result = run_serve_benchmark(config_for(server, options.endpoint, max_concurrency),
                                   run.conversations->first_turns(), run.conversations.get())
                   .value();
  return run;
}

std::vector<nlohmann::json> bodies_of(const FakeOpenAiServer& server) {
  std::vector<nlohmann::json> bodies;
  for (const std::string& body : server.request_bodies()) bodies.push_back(nlohmann::json::parse(body));
  return bodies;
}

TEST(MultiTurn, ChatTurnsCarryEarlierMessagesAndAnswers) {
  auto server = start_fake();
  MultiTurnRun run = run_multi_turn(*server, options_for(Endpoint::kChatCompletions, 3, 3));
  ASSERT_EQ(run.result.records.size(), 9u);
  std::vector<nlohmann::json> bodies = bodies_of(*server);
  ASSERT_EQ(bodies.size(), 9u);
  // Conversation = its first user message; bodies of one conversation arrive turn by turn.
  std::map<std::string, std::vector<nlohmann::json>> by_conversation;
  std::string system_text = bodies[0]["messages"][0]["content"];
  for (const nlohmann::json& body : bodies) {
    const nlohmann::json& messages = body["messages"];
    EXPECT_EQ(messages[0]["role"], "system");
    EXPECT_EQ(messages[0]["content"], system_text);  // shared by every conversation
    by_conversation[messages[1]["content"]].push_back(messages);
  }
  ASSERT_EQ(by_conversation.size(), 3u);
  for (const auto& [first_user, turns] : by_conversation) {
    ASSERT_EQ(turns.size(), 3u);
    for (size_t k = 0; k < turns.size(); ++k) {
      ASSERT_EQ(turns[k].size(), 2 + 2 * k);  // system, (user, assistant) × k, user
      EXPECT_EQ(turns[k].back()["role"], "user");
      if (k == 0) continue;
      for (size_t i = 0; i < turns[k - 1].size(); ++i) EXPECT_EQ(turns[k][i], turns[k - 1][i]);
      EXPECT_EQ(turns[k][turns[k].size() - 2]["role"], "assistant");
      EXPECT_EQ(turns[k][turns[k].size() - 2]["content"], kFakeAnswer);
      EXPECT_NE(turns[k].back()["content"], turns[k - 1].back()["content"]);  // a new user message
    }
  }
}

TEST(MultiTurn, CompletionPromptExtendsThePreviousPromptAndItsAnswer) {
  auto server = start_fake();
  MultiTurnRun run = run_multi_turn(*server, options_for(Endpoint::kCompletions, 2, 3));
  std::vector<nlohmann::json> bodies = bodies_of(*server);
  ASSERT_EQ(bodies.size(), 6u);
  std::vector<std::string> prompts;
  for (const nlohmann::json& body : bodies) prompts.push_back(body["prompt"]);
  std::sort(prompts.begin(), prompts.end(), [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  int num_continued = 0;
  for (const std::string& later : prompts) {
    for (const std::string& earlier : prompts) {
      if (later.rfind(earlier + kFakeAnswer + "\n\n", 0) == 0) ++num_continued;
    }
  }
  // Per conversation: turn 2 extends turn 1, turn 3 extends turn 2 and so turn 1 too.
  EXPECT_EQ(num_continued, 2 * 3);
  for (const RequestRecord& r : run.result.records) EXPECT_TRUE(r.success) << r.error;
}

TEST(MultiTurn, TurnsOfOneConversationNeverOverlapAndAllComplete) {
  auto server = start_fake();
  const int conversations = 5, turns = 4;
  MultiTurnRun run = run_multi_turn(*server, options_for(Endpoint::kChatCompletions, conversations, turns),
                                    /*max_concurrency=*/2);
  BenchMetrics m = compute_metrics(run.result.records, run.result.duration_s, run.result.peak_concurrency, {}, {99});
  ASSERT_EQ(m.failed, 0) << m.first_error;
  EXPECT_EQ(m.completed, conversations * turns);
  EXPECT_LE(run.result.peak_concurrency, 2);
  std::map<int, std::vector<const RequestRecord*>> by_conversation;
  for (const RequestRecord& r : run.result.records) by_conversation[r.conversation].push_back(&r);
  ASSERT_EQ(by_conversation.size(), static_cast<size_t>(conversations));
  for (auto& [conversation, records] : by_conversation) {
    ASSERT_EQ(records.size(), static_cast<size_t>(turns));
    std::sort(records.begin(), records.end(), [](auto* a, auto* b) { return a->turn < b->turn; });
    for (int k = 0; k < turns; ++k) EXPECT_EQ(records[k]->turn, k + 1);
    for (int k = 1; k < turns; ++k) {
      EXPECT_GE(records[k]->start_s, records[k - 1]->start_s + records[k - 1]->e2el_s) << "conversation " << conversation;
      EXPECT_GT(records[k]->prompt_len, records[k - 1]->prompt_len);
    }
  }
}

TEST(MultiTurn, ReportShowsTtftByTurn) {
  auto server = start_fake();
  MultiTurnRun run = run_multi_turn(*server, options_for(Endpoint::kChatCompletions, 2, 3));
  BenchMetrics m = compute_metrics(run.result.records, run.result.duration_s, run.result.peak_concurrency, {}, {99});
  ASSERT_EQ(m.ttft_by_turn.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(m.ttft_by_turn[k].turn, k + 1);
    EXPECT_EQ(m.ttft_by_turn[k].completed, 2);
    EXPECT_GE(m.ttft_by_turn[k].p50_ms, 5.0);  // the fake's first-chunk delay
    EXPECT_GE(m.ttft_by_turn[k].p99_ms, m.ttft_by_turn[k].p50_ms);
  }
  RunDescription description;
  description.dataset_name = "multi-turn";
  std::string table = format_result_table(m, description);
  for (int k = 1; k <= 3; ++k) {
    EXPECT_NE(table.find(fmt::format("TTFT turn {} (ms) p50 / p99:", k)), std::string::npos) << table;
  }
  nlohmann::json j = make_result_json(m, description, run.result, false);
  ASSERT_EQ(j["ttft_by_turn"].size(), 3u);
  EXPECT_EQ(j["ttft_by_turn"][1]["turn"], 2);
  // Other datasets' reports are unchanged.
  std::vector<RequestRecord> single_turn = run.result.records;
  for (RequestRecord& r : single_turn) r.turn = 0;
  BenchMetrics plain = compute_metrics(single_turn, 1.0, 1, {}, {99});
  EXPECT_EQ(format_result_table(plain, description).find("by Turn"), std::string::npos);
  EXPECT_FALSE(make_result_json(plain, description, run.result, false).contains("ttft_by_turn"));
}

TEST(MultiTurn, AFailedTurnEndsItsConversation) {
  FakeServerScript script;
  script.first_chunk_delay_ms = 1;
  script.error_status = 500;
  auto server = FakeOpenAiServer::start(script).value();
  MultiTurnRun run = run_multi_turn(*server, options_for(Endpoint::kChatCompletions, 3, 4));
  EXPECT_EQ(run.result.records.size(), 3u);  // the first turns, all failed
  std::vector<std::string> notes = run.conversations->notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().find("9 turns not sent"), std::string::npos) << notes.back();
}

TEST(MultiTurn, BadValuesAreOneLineErrors) {
  MultiTurnOptions options = options_for(Endpoint::kChatCompletions, 2, 0);
  auto no_turns = MultiTurnConversations::make(options, nullptr);
  ASSERT_FALSE(no_turns.has_value());
  EXPECT_EQ(no_turns.status().message(), "[bench] --multi-turn-turns must be ≥ 1, got 0");
  options.turns = 2;
  options.system_len = -1;
  auto bad_system = MultiTurnConversations::make(options, nullptr);
  ASSERT_FALSE(bad_system.has_value());
  EXPECT_EQ(bad_system.status().message(), "[bench] --multi-turn-system-len must be ≥ 0, got -1");
  options.system_len = 8;
  options.num_conversations = 0;
  EXPECT_FALSE(MultiTurnConversations::make(options, nullptr).has_value());
}

TEST(MultiTurn, NoSystemPromptWhenItsLengthIsZero) {
  MultiTurnOptions options = options_for(Endpoint::kChatCompletions, 2, 2);
  options.system_len = 0;
  auto conversations = MultiTurnConversations::make(options, nullptr).value();
  std::vector<BenchRequest> first = conversations->first_turns();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_TRUE(first[0].history.empty());
  EXPECT_EQ(first[0].prompt_len, 5);
  EXPECT_EQ(conversations->num_planned(), 2);
}

}  // namespace
}  // namespace pagellm::bench
