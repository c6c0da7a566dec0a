#include <map>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "sched/scheduler.h"
#include "fake_model.h"

namespace pagellm {
namespace {

using testing::FakeModel;
using testing::greedy;
using testing::prompt_of;
using testing::run_to_completion;

SchedulerConfig small_config() {
  SchedulerConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 8;
  config.block_size = 4;
  config.num_blocks = 64;
  config.max_model_len = 256;
  return config;
}

// Runs one step through the fake model and returns the plan that was executed.
StepPlan step(Scheduler& scheduler, FakeModel& model, std::vector<RequestUpdate>* updates = nullptr) {
  StepPlan plan = scheduler.schedule();
  testing::expect_plan_within_limits(plan, scheduler.config());
  std::vector<RequestUpdate> u = scheduler.commit(plan, model.execute(plan));
  if (updates) *updates = std::move(u);
  return plan;
}

TEST(Scheduler, NewRequestsPrefillTogetherAndSampleTheirFirstToken) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(3), greedy(4))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(5, 50), greedy(4))).is_ok());
  std::vector<RequestUpdate> updates;
  const StepPlan plan = step(scheduler, model, &updates);
  ASSERT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(plan.rows[0].request_id, 1);
  EXPECT_EQ(plan.rows[0].start_pos, 0);
  EXPECT_EQ(plan.rows[0].token_ids, prompt_of(3));
  EXPECT_TRUE(plan.rows[0].is_sampling);
  EXPECT_TRUE(plan.rows[0].is_new);
  EXPECT_EQ(plan.rows[1].block_tables[0].size(), 2u);  // 5 tokens in blocks of 4
  ASSERT_EQ(updates.size(), 2u);
  EXPECT_EQ(updates[0].new_token_id, FakeModel::reference_output(prompt_of(3), 1)[0]);

  const StepPlan decode = step(scheduler, model);
  ASSERT_EQ(decode.rows.size(), 2u);
  EXPECT_EQ(decode.rows[0].start_pos, 3);
  EXPECT_EQ(decode.rows[0].num_new_tokens(), 1);
  EXPECT_FALSE(decode.rows[0].is_new);
  EXPECT_EQ(decode.rows[1].start_pos, 5);

  const auto outcome = run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, LongPromptIsChunkedWithinTheBudgetAndOthersKeepDecoding) {
  const SchedulerConfig config = small_config();  // 8 tokens per step
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(3), greedy(20))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(3, 70), greedy(20))).is_ok());
  step(scheduler, model);  // both prompts computed; both decode from now on
  const std::vector<TokenId> long_prompt = prompt_of(20, 300);
  ASSERT_TRUE(scheduler.add(Request(3, long_prompt, greedy(5))).is_ok());

  // 20 tokens at 6 per step (2 go to the decodes): [0,6) [6,12) [12,18) [18,20).
  const std::vector<std::pair<int, int>> chunks = {{0, 6}, {6, 12}, {12, 18}, {18, 20}};
  for (const auto& [begin, end] : chunks) {
    const StepPlan plan = step(scheduler, model);
    ASSERT_EQ(plan.rows.size(), 3u);
    EXPECT_EQ(plan.rows[0].request_id, 1);  // decodes first
    EXPECT_EQ(plan.rows[0].num_new_tokens(), 1);
    EXPECT_EQ(plan.rows[1].request_id, 2);
    EXPECT_EQ(plan.rows[1].num_new_tokens(), 1);
    const ScheduledRequest& chunk = plan.rows[2];
    EXPECT_EQ(chunk.request_id, 3);
    EXPECT_EQ(chunk.start_pos, begin);
    EXPECT_EQ(chunk.token_ids, std::vector<TokenId>(long_prompt.begin() + begin, long_prompt.begin() + end));
    EXPECT_EQ(chunk.is_sampling, end == 20);  // only the last chunk samples
    EXPECT_EQ(chunk.is_new, begin == 0);
    EXPECT_LE(plan.num_scheduled_tokens(), 8);
  }
  const StepPlan all_decode = step(scheduler, model);
  ASSERT_EQ(all_decode.rows.size(), 3u);
  for (const auto& row : all_decode.rows) EXPECT_EQ(row.num_new_tokens(), 1);

  const auto outcome = run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, DecodesGoBeforeOlderUnfinishedPrefills) {
  SchedulerConfig config = small_config();
  config.long_prefill_token_threshold = 4;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(16), greedy(3))).is_ok());  // older, long
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(2, 90), greedy(3))).is_ok());
  const StepPlan first = step(scheduler, model);
  ASSERT_EQ(first.rows.size(), 2u);
  EXPECT_EQ(first.rows[0].num_new_tokens(), 4);  // capped by long_prefill_token_threshold
  EXPECT_EQ(first.rows[1].num_new_tokens(), 2);
  const StepPlan second = step(scheduler, model);
  ASSERT_EQ(second.rows.size(), 2u);
  EXPECT_EQ(second.rows[0].request_id, 2);  // the decode, although admitted later
  EXPECT_EQ(second.rows[1].request_id, 1);
  EXPECT_EQ(second.rows[1].start_pos, 4);
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, MaxNumSeqsBoundsTheBatch) {
  SchedulerConfig config = small_config();
  config.max_num_seqs = 2;
  config.max_num_batched_tokens = 64;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  for (RequestId id = 1; id <= 5; ++id) {
    ASSERT_TRUE(scheduler.add(Request(id, prompt_of(5, 100 * id), greedy(6))).is_ok());
  }
  const StepPlan plan = step(scheduler, model);
  EXPECT_EQ(plan.rows.size(), 2u);
  EXPECT_EQ(scheduler.num_running(), 2);
  EXPECT_EQ(scheduler.num_waiting(), 3);
  const auto outcome = run_to_completion(scheduler, model);  // checks ≤ 2 rows every step
  for (RequestId id = 1; id <= 5; ++id) {
    EXPECT_EQ(outcome.outputs.at(id).size() + (id <= 2 ? 1 : 0), 6u);
  }
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, AbortMidPrefillFreesBlocksAtOnce) {
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = 4;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(20), greedy(5))).is_ok());
  const StepPlan plan = step(scheduler, model);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_FALSE(plan.rows[0].is_sampling);
  EXPECT_GT(scheduler.kv_cache().num_used_blocks(), 0);
  ASSERT_TRUE(scheduler.abort(1).is_ok());
  EXPECT_EQ(scheduler.kv_cache().num_used_blocks(), 0);
  EXPECT_EQ(scheduler.find(1), nullptr);
  EXPECT_TRUE(scheduler.is_leak_free());
  const StepPlan next = scheduler.schedule();
  EXPECT_TRUE(next.empty());
  EXPECT_EQ(next.finished_request_ids, std::vector<RequestId>{1});
  (void)scheduler.commit(next, {});
  EXPECT_EQ(scheduler.abort(1).code(), StatusCode::kNotFound);
}

TEST(Scheduler, AbortMidDecodeAndWhileWaiting) {
  SchedulerConfig config = small_config();
  config.max_num_seqs = 1;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(5), greedy(50))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(5, 40), greedy(50))).is_ok());
  for (int i = 0; i < 4; ++i) step(scheduler, model);
  EXPECT_EQ(scheduler.find(1)->status(), RequestStatus::kRunning);
  EXPECT_EQ(scheduler.find(2)->status(), RequestStatus::kWaiting);
  ASSERT_TRUE(scheduler.abort(2).is_ok());  // waiting: never held blocks
  ASSERT_TRUE(scheduler.abort(1).is_ok());  // decoding
  EXPECT_TRUE(scheduler.is_leak_free());
  EXPECT_FALSE(scheduler.has_unfinished_requests());
}

TEST(Scheduler, AbortBetweenScheduleAndCommitDropsThatRow) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(3), greedy(5))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(3, 20), greedy(5))).is_ok());
  const StepPlan plan = scheduler.schedule();
  const StepResult result = model.execute(plan);
  ASSERT_TRUE(scheduler.abort(1).is_ok());
  const auto updates = scheduler.commit(plan, result);
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_EQ(updates[0].request_id, 2);
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndItResumesFirst) {
  SchedulerConfig config = small_config();
  config.num_blocks = 6;  // 24 token slots; each request alone needs ceil((4 + 16 - 1) / 4) = 5
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  const std::vector<TokenId> a = prompt_of(4, 10), b = prompt_of(4, 20), c = prompt_of(4, 30);
  ASSERT_TRUE(scheduler.add(Request(1, a, greedy(16))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, b, greedy(16))).is_ok());
  std::vector<RequestId> preempted;
  std::vector<RequestId> admission_order;
  std::map<RequestId, std::vector<TokenId>> outputs;
  bool c_added = false;
  while (scheduler.has_unfinished_requests()) {
    const StepPlan plan = scheduler.schedule();
    for (RequestId id : plan.preempted_request_ids) {
      preempted.push_back(id);
      if (!c_added) {  // C arrives after B was preempted: B must still go first
        ASSERT_TRUE(scheduler.add(Request(3, c, greedy(16))).is_ok());
        c_added = true;
      }
    }
    for (const auto& row : plan.rows) {
      if (row.is_new) admission_order.push_back(row.request_id);
      if (row.is_new && row.request_id == 2 && !preempted.empty()) {
        EXPECT_EQ(row.start_pos, scheduler.find(2)->num_prefix_cached_tokens());
        EXPECT_GT(row.num_output_tokens, 0);  // outputs kept, recomputed as prompt
      }
    }
    for (const auto& u : scheduler.commit(plan, model.execute(plan))) {
      if (u.new_token_id) outputs[u.request_id].push_back(*u.new_token_id);
    }
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted.front(), 2);  // the newest yields, not the oldest
  EXPECT_EQ(scheduler.stats().num_preemptions, static_cast<int64_t>(preempted.size()));
  // B re-admitted before C although C waited since before.
  const auto b_again = std::find(admission_order.begin() + 2, admission_order.end(), 2);
  const auto c_first = std::find(admission_order.begin(), admission_order.end(), 3);
  EXPECT_LT(b_again, c_first);
  EXPECT_EQ(outputs[1], FakeModel::reference_output(a, 16));
  EXPECT_EQ(outputs[2], FakeModel::reference_output(b, 16));
  EXPECT_EQ(outputs[3], FakeModel::reference_output(c, 16));
  EXPECT_TRUE(scheduler.is_leak_free());
}

struct ExhaustionRun {
  testing::RunOutcome outcome;
  SchedulerStats stats;
};

// 160 requests × 400 output tokens; half of them share a 40-token system prompt.
ExhaustionRun run_exhaustion(int num_blocks, bool enable_prefix_caching,
                             std::vector<std::vector<TokenId>>& prompts,
                             testing::Planning planning = testing::Planning::kSync) {
  SchedulerConfig config;
  config.max_num_seqs = 32;
  config.max_num_batched_tokens = 256;
  config.block_size = 16;
  config.num_blocks = num_blocks;
  config.max_model_len = 1024;
  config.enable_prefix_caching = enable_prefix_caching;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  std::mt19937 rng(7);
  const std::vector<TokenId> system_prompt = prompt_of(40, 5000);
  prompts.clear();
  for (RequestId id = 0; id < 160; ++id) {
    std::vector<TokenId> prompt = id % 2 == 0 ? system_prompt : std::vector<TokenId>{};
    const int num_own_tokens = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < num_own_tokens; ++i) prompt.push_back(static_cast<TokenId>(rng() % 30000));
    prompts.push_back(prompt);
    EXPECT_TRUE(scheduler.add(Request(id, prompt, greedy(400))).is_ok());
  }
  ExhaustionRun run;
  run.outcome = run_to_completion(scheduler, model, planning);
  run.stats = scheduler.stats();
  EXPECT_TRUE(scheduler.is_leak_free());
  return run;
}

TEST(Scheduler, BlockExhaustionAllRequestsFinishWithUnconstrainedOutputs) {
  std::vector<std::vector<TokenId>> prompts;
  // Longest request: 70 + 399 tokens of KV = 30 blocks of 16; the cache has 48.
  const ExhaustionRun tight = run_exhaustion(48, /*enable_prefix_caching=*/true, prompts);
  EXPECT_GT(tight.stats.num_preemptions, 0);
  EXPECT_GT(tight.stats.prefix_cache_hit_tokens, 0);
  ASSERT_EQ(tight.outcome.outputs.size(), 160u);
  for (RequestId id = 0; id < 160; ++id) {
    EXPECT_EQ(tight.outcome.finish_reasons.at(id), FinishReason::kLength);
    ASSERT_EQ(tight.outcome.outputs.at(id), FakeModel::reference_output(prompts[id], 400)) << id;
  }
  // Unconstrained: enough blocks for all at once, no preemption, same outputs.
  const ExhaustionRun roomy = run_exhaustion(160 * 30, true, prompts);
  EXPECT_EQ(roomy.stats.num_preemptions, 0);
  EXPECT_EQ(roomy.outcome.outputs, tight.outcome.outputs);
}

TEST(Scheduler, BlockExhaustionWithoutPrefixCaching) {
  std::vector<std::vector<TokenId>> prompts;
  const ExhaustionRun run = run_exhaustion(40, /*enable_prefix_caching=*/false, prompts);
  EXPECT_GT(run.stats.num_preemptions, 0);
  EXPECT_EQ(run.stats.prefix_cache_query_tokens, 0);
  for (RequestId id = 0; id < 160; ++id) {
    ASSERT_EQ(run.outcome.outputs.at(id), FakeModel::reference_output(prompts[id], 400)) << id;
  }
}

TEST(Scheduler, PrefixCacheHitSkipsPrefillOfTheSharedBlocks) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  const std::vector<TokenId> first = prompt_of(10);
  std::vector<TokenId> second = prompt_of(8);  // two full blocks shared with `first`
  second.insert(second.end(), {7, 7, 7});
  ASSERT_TRUE(scheduler.add(Request(1, first, greedy(3))).is_ok());
  run_to_completion(scheduler, model);
  ASSERT_TRUE(scheduler.add(Request(2, second, greedy(3))).is_ok());
  std::vector<RequestUpdate> updates;
  const StepPlan plan = step(scheduler, model, &updates);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].start_pos, 8);
  EXPECT_EQ(plan.rows[0].token_ids, (std::vector<TokenId>{7, 7, 7}));
  EXPECT_TRUE(plan.rows[0].is_sampling);
  EXPECT_EQ(updates[0].num_prefix_cached_tokens, 8);
  EXPECT_EQ(*updates[0].new_token_id, FakeModel::reference_output(second, 1)[0]);
  const SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.prefix_cache_query_tokens, 10 + 11);
  EXPECT_EQ(stats.prefix_cache_hit_tokens, 8);
  const auto outcome = run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, NoPrefixHitWhenCachingIsOff) {
  SchedulerConfig config = small_config();
  config.enable_prefix_caching = false;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(10), greedy(3))).is_ok());
  run_to_completion(scheduler, model);
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(10), greedy(3))).is_ok());
  const StepPlan plan = step(scheduler, model);
  EXPECT_EQ(plan.rows[0].start_pos, 0);
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, RejectsWhatCanNeverRun) {
  SchedulerConfig config = small_config();
  config.max_model_len = 4096;
  config.num_blocks = 4;  // 16 token slots
  Scheduler scheduler(config);
  Status too_long = scheduler.add(Request(1, std::vector<TokenId>(5000, 1), greedy(100)));
  EXPECT_EQ(too_long.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(too_long.message(),
            "[scheduler] prompt of 5000 tokens + max_tokens 100 exceeds max_model_len 4096");
  // 17 prompt tokens need 5 blocks of 4: more than the whole cache.
  Status never_fits = scheduler.add(Request(2, prompt_of(17), greedy(1)));
  EXPECT_EQ(never_fits.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(never_fits.message().find("whole cache has 4"), std::string::npos) << never_fits.message();
  // 15 prompt + 2 outputs: KV for 16 tokens (the last output never needs KV) fits exactly.
  EXPECT_TRUE(scheduler.add(Request(3, prompt_of(15), greedy(2))).is_ok());
  EXPECT_FALSE(scheduler.add(Request(4, prompt_of(15), greedy(3))).is_ok());
  EXPECT_FALSE(scheduler.add(Request(5, {}, greedy(3))).is_ok());
  EXPECT_FALSE(scheduler.add(Request(3, prompt_of(2), greedy(3))).is_ok());  // id live
  SamplingParams bad = greedy(3);
  bad.top_p = 0.0f;
  EXPECT_FALSE(scheduler.add(Request(6, prompt_of(2), bad)).is_ok());
  FakeModel model(config.num_blocks, config.block_size);
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, StopConditionsEndRequests) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  const std::vector<TokenId> prompt = prompt_of(5);
  const std::vector<TokenId> expected = FakeModel::reference_output(prompt, 10);
  ASSERT_NE(expected[0], expected[2]);
  ASSERT_NE(expected[1], expected[2]);

  SamplingParams eos = greedy(10, /*ignore_eos=*/false);
  eos.eos_token_ids = {expected[2]};
  SamplingParams ignored = eos;
  ignored.ignore_eos = true;
  SamplingParams stop_id = greedy(10);
  stop_id.stop_token_ids = {expected[1]};
  SamplingParams held = stop_id;
  held.min_tokens = 5;  // expected[1] comes too early; runs on to max_tokens unless it repeats
  ASSERT_TRUE(scheduler.add(Request(1, prompt, eos)).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt, ignored)).is_ok());
  ASSERT_TRUE(scheduler.add(Request(3, prompt, stop_id)).is_ok());
  ASSERT_TRUE(scheduler.add(Request(4, prompt, held)).is_ok());
  const auto outcome = run_to_completion(scheduler, model);
  EXPECT_EQ(outcome.outputs.at(1), std::vector<TokenId>(expected.begin(), expected.begin() + 3));
  EXPECT_EQ(outcome.finish_reasons.at(1), FinishReason::kStop);
  EXPECT_EQ(outcome.outputs.at(2), expected);
  EXPECT_EQ(outcome.finish_reasons.at(2), FinishReason::kLength);
  EXPECT_EQ(outcome.outputs.at(3), std::vector<TokenId>(expected.begin(), expected.begin() + 2));
  EXPECT_EQ(outcome.finish_reasons.at(3), FinishReason::kStop);
  EXPECT_GE(outcome.outputs.at(4).size(), 5u);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, FinishEarlyForAStopStringFoundByTheEngine) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(5), greedy(10))).is_ok());
  step(scheduler, model);
  ASSERT_TRUE(scheduler.finish_early(1, FinishReason::kStop).is_ok());
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, SamplingRowsCarryParamsAndHistoryWhenPenaltiesNeedIt) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  SamplingParams penalised = greedy(3);
  penalised.repetition_penalty = 1.2f;
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(4), penalised)).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(4), greedy(3))).is_ok());
  step(scheduler, model);
  const StepPlan plan = step(scheduler, model);
  ASSERT_EQ(plan.rows.size(), 2u);
  ASSERT_NE(plan.rows[0].sampling, nullptr);
  EXPECT_FLOAT_EQ(plan.rows[0].sampling->repetition_penalty, 1.2f);
  EXPECT_EQ(plan.rows[0].history_token_ids.size(), 5u);  // 4 prompt + 1 output
  EXPECT_EQ(plan.rows[0].num_prompt_tokens, 4);
  EXPECT_EQ(plan.rows[0].num_output_tokens, 1);
  EXPECT_TRUE(plan.rows[1].history_token_ids.empty());
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

// ----- async planning: step N+1 is scheduled before step N's tokens are committed -----

using testing::Planning;

TEST(SchedulerAsync, DecodesCarryThePlaceholderAndStopBeforeMaxTokens) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(3), greedy(3))).is_ok());
  const StepPlan p0 = scheduler.schedule();  // prefill, samples o0
  const StepResult r0 = model.execute(p0);
  const StepPlan p1 = scheduler.schedule();  // planned before o0 is known
  ASSERT_EQ(p1.rows.size(), 1u);
  EXPECT_EQ(p1.rows[0].token_ids, std::vector<TokenId>{kPlaceholderToken});
  EXPECT_EQ(p1.rows[0].start_pos, 3);
  EXPECT_TRUE(p1.rows[0].is_sampling);
  EXPECT_EQ(p1.rows[0].num_output_tokens, 1);  // the seed counter counts the placeholder
  const StepResult r1 = model.execute(p1);
  const auto u0 = scheduler.commit(p0, r0);
  ASSERT_EQ(u0.size(), 1u);
  const StepPlan p2 = scheduler.schedule();  // samples o2, the last of max_tokens 3
  ASSERT_EQ(p2.rows.size(), 1u);
  EXPECT_EQ(p2.rows[0].token_ids, std::vector<TokenId>{kPlaceholderToken});
  const StepResult r2 = model.execute(p2);
  scheduler.commit(p1, r1);
  EXPECT_TRUE(scheduler.schedule().empty()) << "o2 is the last token: nothing to plan past it";
  const auto u2 = scheduler.commit(p2, r2);
  ASSERT_EQ(u2.size(), 1u);
  EXPECT_EQ(u2[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(u2[0].num_output_tokens, 3);
  EXPECT_EQ(model.num_placeholder_inputs(), 2);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(SchedulerAsync, AStopTokenInFlightWastesOneRowAndFreesEverything) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  const std::vector<TokenId> prompt = prompt_of(5);
  const std::vector<TokenId> expected = FakeModel::reference_output(prompt, 4);
  SamplingParams stop_id = greedy(10);
  stop_id.stop_token_ids = {expected[1]};
  ASSERT_TRUE(scheduler.add(Request(1, prompt, stop_id)).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt, greedy(4))).is_ok());
  const auto outcome = run_to_completion(scheduler, model, Planning::kAsync);
  EXPECT_EQ(outcome.outputs.at(1), std::vector<TokenId>(expected.begin(), expected.begin() + 2));
  EXPECT_EQ(outcome.finish_reasons.at(1), FinishReason::kStop);
  EXPECT_EQ(outcome.outputs.at(2), expected);
  EXPECT_EQ(outcome.finish_reasons.at(2), FinishReason::kLength);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(SchedulerAsync, StopConditionsAndAbortsGiveTheSyncOutputs) {
  for (Planning planning : {Planning::kSync, Planning::kAsync}) {
    const SchedulerConfig config = small_config();
    Scheduler scheduler(config);
    FakeModel model(config.num_blocks, config.block_size);
    const std::vector<TokenId> prompt = prompt_of(5);
    const std::vector<TokenId> expected = FakeModel::reference_output(prompt, 10);
    SamplingParams eos = greedy(10, /*ignore_eos=*/false);
    eos.eos_token_ids = {expected[2]};
    SamplingParams held = greedy(10);
    held.stop_token_ids = {expected[1]};
    held.min_tokens = 5;
    ASSERT_TRUE(scheduler.add(Request(1, prompt, eos)).is_ok());
    ASSERT_TRUE(scheduler.add(Request(2, prompt, held)).is_ok());
    ASSERT_TRUE(scheduler.add(Request(3, prompt_of(20, 50), greedy(6))).is_ok());
    const auto outcome = run_to_completion(scheduler, model, planning);
    EXPECT_EQ(outcome.outputs.at(1), std::vector<TokenId>(expected.begin(), expected.begin() + 3));
    EXPECT_EQ(outcome.finish_reasons.at(1), FinishReason::kStop);
    EXPECT_GE(outcome.outputs.at(2).size(), 5u);
    EXPECT_EQ(outcome.outputs.at(3), FakeModel::reference_output(prompt_of(20, 50), 6));
    EXPECT_TRUE(scheduler.is_leak_free());
  }
}

TEST(SchedulerAsync, AbortWithTwoStepsInFlightDropsBothRows) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(3), greedy(8))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(3, 20), greedy(8))).is_ok());
  const StepPlan p0 = scheduler.schedule();
  const StepResult r0 = model.execute(p0);
  const StepPlan p1 = scheduler.schedule();
  const StepResult r1 = model.execute(p1);
  ASSERT_TRUE(scheduler.abort(1).is_ok());
  const auto u0 = scheduler.commit(p0, r0);
  ASSERT_EQ(u0.size(), 1u);
  EXPECT_EQ(u0[0].request_id, 2);
  const StepPlan p2 = scheduler.schedule();
  ASSERT_EQ(p2.rows.size(), 1u);
  EXPECT_EQ(p2.finished_request_ids, std::vector<RequestId>{1});
  const StepResult r2 = model.execute(p2);
  EXPECT_EQ(scheduler.commit(p1, r1).size(), 1u);
  EXPECT_EQ(scheduler.commit(p2, r2).size(), 1u);
  const auto outcome = run_to_completion(scheduler, model, Planning::kAsync);
  EXPECT_EQ(outcome.outputs.at(2).size(), 5u);  // 3 committed above, 5 more
  EXPECT_TRUE(scheduler.is_leak_free());
}

// Preemption while a step of the victim is in flight: its token still lands, it resumes only after
// that commit, and every output equals an unconstrained run's.
TEST(SchedulerAsync, BlockExhaustionWithStepsInFlightGivesUnconstrainedOutputs) {
  std::vector<std::vector<TokenId>> prompts;
  for (bool prefix_caching : {true, false}) {
    const ExhaustionRun run = run_exhaustion(48, prefix_caching, prompts, Planning::kAsync);
    EXPECT_GT(run.stats.num_preemptions, 0);
    ASSERT_EQ(run.outcome.outputs.size(), 160u);
    for (RequestId id = 0; id < 160; ++id) {
      EXPECT_EQ(run.outcome.finish_reasons.at(id), FinishReason::kLength);
      ASSERT_EQ(run.outcome.outputs.at(id), FakeModel::reference_output(prompts[id], 400)) << id;
    }
  }
}

TEST(SchedulerAsync, PenaltyHistoryEndsWithThePlaceholder) {
  const SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  SamplingParams penalised = greedy(3);
  penalised.repetition_penalty = 1.2f;
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(4), penalised)).is_ok());
  const StepPlan p0 = scheduler.schedule();
  const StepResult r0 = model.execute(p0);
  const StepPlan p1 = scheduler.schedule();
  ASSERT_EQ(p1.rows.size(), 1u);
  std::vector<TokenId> want = prompt_of(4);
  want.push_back(kPlaceholderToken);
  EXPECT_EQ(p1.rows[0].history_token_ids, want);
  scheduler.commit(p0, r0);
  scheduler.commit(p1, model.execute(p1));
  run_to_completion(scheduler, model, Planning::kAsync);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(Scheduler, ConfigValidation) {
  SchedulerConfig config = small_config();
  EXPECT_TRUE(config.validate().is_ok());
  config.max_num_seqs = 0;
  EXPECT_EQ(config.validate().message(), "[scheduler] max_num_seqs must be >= 1, got 0");
  config = small_config();
  config.max_long_partial_prefills = -1;
  EXPECT_EQ(config.validate().message(),
            "[scheduler] max_num_partial_prefills and max_long_partial_prefills must be >= 0, got 0 and -1");
  config.max_long_partial_prefills = 3;
  config.max_num_partial_prefills = 2;
  EXPECT_EQ(config.validate().message(),
            "[scheduler] max_long_partial_prefills (3) must not exceed max_num_partial_prefills (2)");
  config.max_num_partial_prefills = 0;  // no limit on all prompts: any long limit is fine
  EXPECT_TRUE(config.validate().is_ok());
}

// ----- concurrent partial prefills (vLLM's max_num_partial_prefills / max_long_partial_prefills) -----

SchedulerConfig partial_prefill_config(int max_num_partial, int max_long_partial, int budget = 16) {
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = budget;
  config.long_prefill_token_threshold = 4;  // prompts past 4 tokens are long; 4 tokens a request a step
  config.max_num_partial_prefills = max_num_partial;
  config.max_long_partial_prefills = max_long_partial;
  return config;
}

// The step index at which each request was first scheduled, and each request's outputs.
struct PartialPrefillRun {
  std::map<RequestId, int64_t> first_step;
  std::map<RequestId, int64_t> prompt_done_step;  // the step that sampled the first token
  testing::RunOutcome outcome;
};

PartialPrefillRun run_partial_prefills(const SchedulerConfig& config, const std::vector<std::vector<TokenId>>& prompts) {
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_TRUE(scheduler.add(Request(static_cast<RequestId>(i), prompts[i], greedy(3))).is_ok());
  PartialPrefillRun run;
  for (int64_t s = 0; !scheduler.is_leak_free() && s < 1000; ++s) {
    std::vector<RequestUpdate> updates;
    const StepPlan plan = step(scheduler, model, &updates);
    int num_long_partial = 0, num_partial = 0;
    for (const ScheduledRequest& row : plan.rows) {
      run.first_step.try_emplace(row.request_id, s);
      if (row.context_len() < row.num_prompt_tokens) {  // the step leaves this prompt unfinished
        ++num_partial;
        if (row.num_prompt_tokens > config.long_prefill_token_threshold) ++num_long_partial;
      }
    }
    if (config.max_num_partial_prefills > 0) {
      EXPECT_LE(num_partial, config.max_num_partial_prefills) << "step " << s;
    }
    if (config.max_long_partial_prefills > 0) {
      EXPECT_LE(num_long_partial, config.max_long_partial_prefills) << "step " << s;
    }
    for (const RequestUpdate& update : updates) {
      if (update.new_token_id && update.num_output_tokens == 1) run.prompt_done_step[update.request_id] = s;
      if (update.new_token_id) run.outcome.outputs[update.request_id].push_back(*update.new_token_id);
    }
  }
  EXPECT_TRUE(scheduler.is_leak_free());
  return run;
}

// Two 20-token prompts ahead of a 3-token one, 8 tokens a step: with one long prompt at a time, the
// short prompt starts (and samples) in the first step beside the first long one, and the second long
// prompt waits for the first one's prompt to finish. First come, first served, the two long prompts
// take every step's budget and the short one waits for both.
TEST(Scheduler, ShortPromptsStartAheadOfLongOnesAtTheLongLimit) {
  const std::vector<std::vector<TokenId>> prompts = {prompt_of(20, 100), prompt_of(20, 200), prompt_of(3, 300)};
  const PartialPrefillRun limited = run_partial_prefills(partial_prefill_config(4, 1, 8), prompts);
  EXPECT_EQ(limited.first_step.at(0), 0);
  EXPECT_EQ(limited.first_step.at(2), 0);        // jumped the queue
  EXPECT_EQ(limited.prompt_done_step.at(2), 0);  // its first token in the first step
  EXPECT_EQ(limited.prompt_done_step.at(0), 4);  // 20 tokens at 4 a step
  EXPECT_EQ(limited.first_step.at(1), 4);        // the long limit freed by request 0's last piece
  for (RequestId id = 0; id < 3; ++id)
    EXPECT_EQ(limited.outcome.outputs.at(id), FakeModel::reference_output(prompts[static_cast<size_t>(id)], 3)) << id;

  // No limits (the default): FIFO, both long prompts at once, the short one behind them.
  const PartialPrefillRun fifo = run_partial_prefills(partial_prefill_config(0, 0, 8), prompts);
  EXPECT_EQ(fifo.first_step.at(1), 0);
  EXPECT_EQ(fifo.prompt_done_step.at(0), 4);
  EXPECT_EQ(fifo.prompt_done_step.at(1), 4);
  EXPECT_EQ(fifo.first_step.at(2), 5);  // 4 + 4 tokens a step until both prompts are done
  EXPECT_EQ(fifo.outcome.outputs, limited.outcome.outputs);
}

// max_num_partial_prefills bounds every unfinished prompt, long or short; a prompt that the step
// finishes does not count, so short prompts keep starting.
TEST(Scheduler, MaxNumPartialPrefillsStopsAdmissionOfUnfinishedPrompts) {
  const std::vector<std::vector<TokenId>> prompts = {prompt_of(20, 100), prompt_of(20, 200), prompt_of(3, 300),
                                                     prompt_of(2, 400)};
  const PartialPrefillRun run = run_partial_prefills(partial_prefill_config(1, 0), prompts);
  EXPECT_EQ(run.first_step.at(0), 0);
  EXPECT_EQ(run.first_step.at(1), 4);  // waits for request 0's prompt: FIFO, the short ones behind it
  EXPECT_EQ(run.first_step.at(2), 4);
  EXPECT_EQ(run.first_step.at(3), 4);
  for (RequestId id = 0; id < 4; ++id)
    EXPECT_EQ(run.outcome.outputs.at(id), FakeModel::reference_output(prompts[static_cast<size_t>(id)], 3)) << id;
}

// Many prompts of mixed lengths under every limit: each finishes with the unconstrained outputs, every
// step within the limits (checked per step), nothing leaks, and long prompts start in arrival order.
TEST(Scheduler, PartialPrefillLimitsKeepOutputsAndLongPromptsInOrder) {
  std::mt19937 rng(3);
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 40; ++i) {
    const int length = i % 3 == 0 ? 12 + static_cast<int>(rng() % 20) : 1 + static_cast<int>(rng() % 4);
    prompts.push_back(prompt_of(length, 1000 + 100 * i));
  }
  const PartialPrefillRun reference = run_partial_prefills(partial_prefill_config(0, 0), prompts);
  for (const auto& [max_num, max_long] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 2}, {3, 0}, {0, 1}}) {
    SCOPED_TRACE(::testing::Message() << "max_num_partial_prefills " << max_num << ", max_long " << max_long);
    const PartialPrefillRun run = run_partial_prefills(partial_prefill_config(max_num, max_long), prompts);
    EXPECT_EQ(run.outcome.outputs, reference.outcome.outputs);
    int64_t last_long_start = -1;
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].size() <= 4) continue;
      const int64_t start = run.first_step.at(static_cast<RequestId>(i));
      EXPECT_GE(start, last_long_start) << "long prompt " << i;
      last_long_start = start;
    }
  }
}


// ----- KV cache groups: sliding-window layers release blocks while requests run -----

struct SlidingRun {
  testing::RunOutcome outcome;
  SchedulerStats stats;
  std::vector<std::vector<TokenId>> prompts;
};

// 60 requests x 60 output tokens, blocks of 4, steps of 32 tokens: half share a 22-token system
// prompt, so prefix hits, chunk edges, window edges (windows of 10 are not a multiple of 4) and
// preemption all meet.
SlidingRun run_sliding(std::vector<int32_t> windows, int num_blocks, bool enable_prefix_caching,
                       testing::Planning planning) {
  SchedulerConfig config;
  config.max_num_seqs = 16;
  config.max_num_batched_tokens = 32;
  config.block_size = 4;
  config.num_blocks = num_blocks;
  config.max_model_len = 256;
  config.enable_prefix_caching = enable_prefix_caching;
  config.kv_group_windows = windows;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size, windows);
  std::mt19937 rng(11);
  const std::vector<TokenId> system_prompt = prompt_of(22, 5000);
  SlidingRun run;
  for (RequestId id = 0; id < 60; ++id) {
    std::vector<TokenId> prompt = id % 2 == 0 ? system_prompt : std::vector<TokenId>{};
    const int num_own_tokens = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < num_own_tokens; ++i) prompt.push_back(static_cast<TokenId>(rng() % 30000));
    run.prompts.push_back(prompt);
    EXPECT_TRUE(scheduler.add(Request(id, prompt, greedy(60))).is_ok());
  }
  run.outcome = run_to_completion(scheduler, model, planning);
  run.stats = scheduler.stats();
  EXPECT_TRUE(scheduler.is_leak_free());
  return run;
}

TEST(SchedulerSliding, FullAndSlidingGroupsGiveTheUnconstrainedOutputsUnderEveryPressure) {
  const std::vector<int32_t> windows = {kFullAttention, 10, 10};
  for (const testing::Planning planning : {testing::Planning::kSync, testing::Planning::kAsync}) {
    for (bool prefix_caching : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "async " << (planning == testing::Planning::kAsync) << " prefix caching "
                                        << prefix_caching);
      // Longest request: 52 + 59 tokens = 28 full blocks + 2 x 17 sliding (steps of 32): 64 fit it alone.
      const SlidingRun tight = run_sliding(windows, 64, prefix_caching, planning);
      EXPECT_GT(tight.stats.num_preemptions, 0);
      if (prefix_caching) {
        EXPECT_GT(tight.stats.prefix_cache_hit_tokens, 0);
      }
      ASSERT_EQ(tight.outcome.outputs.size(), 60u);
      for (RequestId id = 0; id < 60; ++id)
        ASSERT_EQ(tight.outcome.outputs.at(id), FakeModel::reference_output(tight.prompts[id], 60, windows)) << id;
      const SlidingRun roomy = run_sliding(windows, 60 * 64, prefix_caching, planning);
      EXPECT_EQ(roomy.stats.num_preemptions, 0);
      EXPECT_EQ(roomy.outcome.outputs, tight.outcome.outputs);
    }
  }
}

TEST(SchedulerSliding, AllSlidingModelFreesToo) {
  const std::vector<int32_t> windows = {10};
  for (const testing::Planning planning : {testing::Planning::kSync, testing::Planning::kAsync}) {
    const SlidingRun tight = run_sliding(windows, 24, /*enable_prefix_caching=*/true, planning);
    EXPECT_GT(tight.stats.num_preemptions, 0);
    for (RequestId id = 0; id < 60; ++id)
      ASSERT_EQ(tight.outcome.outputs.at(id), FakeModel::reference_output(tight.prompts[id], 60, windows)) << id;
  }
}

TEST(SchedulerSliding, ALongRequestHoldsItsWindowNotItsLength) {
  SchedulerConfig config = small_config();  // blocks of 4, steps of 8
  config.num_blocks = 64;
  config.kv_group_windows = {kFullAttention, 8};
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size, config.kv_group_windows);
  const std::vector<TokenId> prompt = prompt_of(40);
  ASSERT_TRUE(scheduler.add(Request(1, prompt, greedy(100))).is_ok());
  int peak = 0;
  while (scheduler.has_unfinished_requests()) {
    step(scheduler, model);
    if (const Request* r = scheduler.find(1)) {
      peak = std::max(peak, scheduler.kv_cache().num_used_blocks());
      EXPECT_LE(scheduler.kv_cache().num_blocks_held(1, 1), 5) << "sliding group, context " << r->num_tokens();
    }
  }
  // 139 tokens of KV: 35 full blocks; the sliding group holds at most ceil((8 - 1 + 8) / 4) + 1 = 5.
  EXPECT_LE(peak, 35 + 5);
  EXPECT_TRUE(scheduler.is_leak_free());
  // It fits the cache only because its sliding group holds a window: two full-length groups would
  // need 2 x 35 > 64 blocks, 35 + 5 fit.
  Scheduler again(config);
  EXPECT_TRUE(again.add(Request(2, prompt, greedy(100))).is_ok());
  SchedulerConfig all_full = config;
  all_full.kv_group_windows = {kFullAttention, kFullAttention};
  Scheduler rejects(all_full);
  EXPECT_FALSE(rejects.add(Request(3, prompt, greedy(100))).is_ok());
}

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

// Hybrid models at test scale (GDN chunk 8, checkpoints every 8 tokens, blocks of 4): a prompt is
// cut on chunk ends whatever the budget, its rows plan checkpoints at interval multiples, and a
// later request with the same prompt starts from the newest checkpoint it can restore.
TEST(SchedulerHybrid, PromptPiecesEndOnGdnChunksAndARepeatRestoresTheNewestCheckpoint) {
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = 12;
  config.gdn_chunk_tokens = 8;
  config.num_state_checkpoints = 8;
  config.checkpoint_interval_tokens = 8;
  ASSERT_TRUE(config.validate().is_ok());
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(1, prompt_of(30), greedy(2))).is_ok());
  std::vector<std::pair<int, int>> pieces;  // (start, end)
  std::vector<int> checkpoints;
  while (scheduler.find(1) != nullptr) {
    const StepPlan plan = step(scheduler, model);
    for (const ScheduledRequest& row : plan.rows) {
      pieces.emplace_back(row.start_pos, row.context_len());
      for (const PlannedCheckpoint& c : row.state_checkpoints) checkpoints.push_back(c.num_tokens);
    }
  }
  const std::vector<std::pair<int, int>> want_pieces = {{0, 8}, {8, 16}, {16, 24}, {24, 30}, {30, 31}};
  EXPECT_EQ(pieces, want_pieces);
  EXPECT_EQ(checkpoints, (std::vector<int>{8, 16, 24})) << "prompt positions only, none in decode";

  ASSERT_TRUE(scheduler.add(Request(2, prompt_of(30), greedy(2))).is_ok());
  const StepPlan plan = step(scheduler, model);
  ASSERT_EQ(plan.rows.size(), 1u);
  EXPECT_EQ(plan.rows[0].start_pos, 24);
  EXPECT_GE(plan.rows[0].restore_state_checkpoint, 0);
  EXPECT_EQ(scheduler.stats().prefix_cache_hit_tokens, 24);
  run_to_completion(scheduler, model);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(SchedulerHybrid, PrefixCachingWithoutCheckpointsIsRefused) {
  SchedulerConfig config = small_config();
  config.gdn_chunk_tokens = 8;
  EXPECT_FALSE(config.validate().is_ok());
  config.enable_prefix_caching = false;
  EXPECT_TRUE(config.validate().is_ok());
}

}  // namespace
}  // namespace pagellm
