// Speculative decoding in the scheduler: drafts scheduled within the budget and max_tokens,
// verified at commit (kept while the target agrees, then the target's token), rejected drafts'
// KV dropped. The fake model hashes each position's whole context read back through the block
// tables, so stale KV of a rejected draft, a wrong rollback or a block freed too early changes
// the outputs, which must equal the plain greedy run.
#include <functional>
#include <numeric>

#include <gtest/gtest.h>

#include "fake_model.h"
#include "sched/ngram_proposer.h"
#include "sched/scheduler.h"

namespace pagellm {
namespace {

using testing::FakeModel;
using testing::greedy;
using testing::prompt_of;

SchedulerConfig small_config() {
  SchedulerConfig config;
  config.max_num_seqs = 8;
  config.max_num_batched_tokens = 16;
  config.block_size = 4;
  config.num_blocks = 64;
  config.max_model_len = 256;
  return config;
}

// Drafts for a request: the true greedy continuation, with position `wrong_at` replaced (-1: none).
std::vector<TokenId> oracle_drafts(const Request& request, int k, int wrong_at) {
  const std::vector<TokenId> tokens(request.token_ids().begin(), request.token_ids().end());
  std::vector<TokenId> drafts = FakeModel::reference_output(tokens, k);
  if (wrong_at >= 0 && wrong_at < k) drafts[static_cast<size_t>(wrong_at)] = 7;  // never a fake-model token
  return drafts;
}

using Proposer = std::function<DraftProposals(const Scheduler&, int64_t step)>;

struct SpecOutcome {
  testing::RunOutcome run;
  int64_t max_tokens_in_one_commit = 0;
};

SpecOutcome run_speculative(Scheduler& scheduler, FakeModel& model, const Proposer& propose) {
  SpecOutcome outcome;
  while (scheduler.has_unfinished_requests() && outcome.run.num_steps < 100000) {
    const DraftProposals drafts = propose(scheduler, outcome.run.num_steps);
    const StepPlan plan = scheduler.schedule(&drafts);
    testing::expect_plan_within_limits(plan, scheduler.config());
    std::map<RequestId, int64_t> per_request;
    for (const RequestUpdate& update : scheduler.commit(plan, model.execute(plan))) {
      if (update.new_token_id) outcome.run.outputs[update.request_id].push_back(*update.new_token_id);
      if (update.finish_reason) outcome.run.finish_reasons[update.request_id] = *update.finish_reason;
      outcome.max_tokens_in_one_commit = std::max(outcome.max_tokens_in_one_commit, ++per_request[update.request_id]);
    }
    ++outcome.run.num_steps;
  }
  EXPECT_FALSE(scheduler.has_unfinished_requests());
  return outcome;
}

// Every decoding request gets k drafts; request id % 3 picks where they go wrong (none, first, third).
Proposer oracle(int k) {
  return [k](const Scheduler& scheduler, int64_t) {
    DraftProposals drafts;
    for (const Request* request : scheduler.running_requests()) {
      if (request->num_missing_tokens() != 1) continue;
      const int wrong_at = request->id() % 3 == 0 ? -1 : (request->id() % 3 == 1 ? 0 : 2);
      drafts[request->id()] = oracle_drafts(*request, k, wrong_at);
    }
    return drafts;
  };
}

TEST(SpeculativeScheduling, VerifiedDraftsGiveTheGreedyOutputsAndDropRejectedKv) {
  SchedulerConfig config = small_config();
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  for (RequestId id = 1; id <= 6; ++id)
    ASSERT_TRUE(scheduler.add(Request(id, prompt_of(3 + 2 * static_cast<int>(id), 100 * static_cast<TokenId>(id)),
                                      greedy(20))).is_ok());
  const SpecOutcome outcome = run_speculative(scheduler, model, oracle(4));
  for (RequestId id = 1; id <= 6; ++id)
    EXPECT_EQ(outcome.run.outputs.at(id),
              FakeModel::reference_output(prompt_of(3 + 2 * static_cast<int>(id), 100 * static_cast<TokenId>(id)), 20))
        << "request " << id;
  EXPECT_TRUE(scheduler.is_leak_free());
  const SchedulerStats stats = scheduler.stats();
  EXPECT_GT(stats.num_spec_drafts, 0);
  EXPECT_LE(stats.num_spec_draft_tokens, 4 * stats.num_spec_drafts);
  EXPECT_GT(stats.num_spec_accepted_tokens, 0);
  EXPECT_LT(stats.num_spec_accepted_tokens, stats.num_spec_draft_tokens);
  ASSERT_EQ(stats.num_spec_accepted_per_position.size(), 4u);
  // Requests 2 and 5 (wrong at 2) accept positions 0 and 1 only; 3 and 6 all; 1 and 4 none.
  const std::vector<int64_t>& per_position = stats.num_spec_accepted_per_position;
  EXPECT_GT(per_position[1], per_position[2]);
  EXPECT_GE(per_position[2], per_position[3]);
  EXPECT_GT(per_position[3], 0);
  EXPECT_EQ(per_position[0] + per_position[1] + per_position[2] + per_position[3], stats.num_spec_accepted_tokens);
  EXPECT_EQ(outcome.max_tokens_in_one_commit, 5);  // 4 drafts accepted + the target's token
}

TEST(SpeculativeScheduling, MaxTokensBudgetAndThresholdCutTheDrafts) {
  SchedulerConfig config = small_config();
  config.max_num_batched_tokens = 6;
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(3, prompt_of(5), greedy(7))).is_ok());
  ASSERT_TRUE(scheduler.add(Request(6, prompt_of(4, 50), greedy(3))).is_ok());
  const SpecOutcome outcome = run_speculative(scheduler, model, oracle(10));
  EXPECT_EQ(outcome.run.outputs.at(3), FakeModel::reference_output(prompt_of(5), 7));
  EXPECT_EQ(outcome.run.outputs.at(6), FakeModel::reference_output(prompt_of(4, 50), 3));
  EXPECT_EQ(outcome.run.finish_reasons.at(3), FinishReason::kLength);
  EXPECT_TRUE(scheduler.is_leak_free());

  // One request alone, plans inspected: 1 + k never exceeds the budget nor the tokens max_tokens leaves.
  Scheduler alone(config);
  FakeModel alone_model(config.num_blocks, config.block_size);
  ASSERT_TRUE(alone.add(Request(3, prompt_of(5), greedy(9))).is_ok());
  int produced = 0;
  while (alone.has_unfinished_requests()) {
    const DraftProposals drafts = oracle(10)(alone, 0);
    const StepPlan plan = alone.schedule(&drafts);
    ASSERT_EQ(plan.rows.size(), 1u);
    EXPECT_LE(plan.rows[0].num_new_tokens(), config.max_num_batched_tokens);
    if (produced > 0) EXPECT_EQ(plan.rows[0].num_draft_tokens, std::min(5, 9 - produced - 1));
    produced += static_cast<int>(alone.commit(plan, alone_model.execute(plan)).size());
  }
  EXPECT_EQ(produced, 9);
  EXPECT_TRUE(alone.is_leak_free());
}

TEST(SpeculativeScheduling, AStopTokenAmongAcceptedDraftsStopsThere) {
  const SchedulerConfig config = small_config();
  const std::vector<TokenId> prompt = prompt_of(6);
  const std::vector<TokenId> reference = FakeModel::reference_output(prompt, 12);
  SamplingParams params = greedy(12);
  params.stop_token_ids = {reference[5]};  // the 6th output: inside a row of 4 accepted drafts
  Scheduler scheduler(config);
  FakeModel model(config.num_blocks, config.block_size);
  ASSERT_TRUE(scheduler.add(Request(3, prompt, params)).is_ok());
  const SpecOutcome outcome = run_speculative(scheduler, model, oracle(4));
  EXPECT_EQ(outcome.run.outputs.at(3), std::vector<TokenId>(reference.begin(), reference.begin() + 6));
  EXPECT_EQ(outcome.run.finish_reasons.at(3), FinishReason::kStop);
  EXPECT_TRUE(scheduler.is_leak_free());
}

TEST(SpeculativeScheduling, PreemptionAndPrefixCachingKeepTheOutputs) {
  SchedulerConfig config = small_config();
  config.num_blocks = 14;  // 56 slots for 6 requests of ~30 tokens: preemption
  for (const bool prefix_caching : {true, false}) {
    config.enable_prefix_caching = prefix_caching;
    Scheduler scheduler(config);
    FakeModel model(config.num_blocks, config.block_size);
    std::vector<std::vector<TokenId>> prompts;
    for (RequestId id = 1; id <= 6; ++id) {
      prompts.push_back(prompt_of(9, id % 2 == 0 ? 500 : 700));  // shared prompts: prefix hits
      prompts.back().push_back(static_cast<TokenId>(id));
      ASSERT_TRUE(scheduler.add(Request(id, prompts.back(), greedy(20))).is_ok());
    }
    const SpecOutcome outcome = run_speculative(scheduler, model, oracle(3));
    for (RequestId id = 1; id <= 6; ++id)
      EXPECT_EQ(outcome.run.outputs.at(id), FakeModel::reference_output(prompts[static_cast<size_t>(id - 1)], 20))
          << "request " << id << " prefix caching " << prefix_caching;
    EXPECT_GT(scheduler.stats().num_preemptions, 0);
    if (prefix_caching) EXPECT_GT(scheduler.stats().prefix_cache_hit_tokens, 0);
    EXPECT_TRUE(scheduler.is_leak_free());
  }
}

TEST(NgramProposer, LongestSuffixFirstLatestOccurrence) {
  const std::vector<TokenId> tokens = {1, 2, 3, 9, 1, 2, 3, 8, 5, 2, 3};
  // Suffix "2 3": latest earlier occurrence at 5 -> 8 5 2; "1 2 3" does not end the sequence.
  EXPECT_EQ(propose_ngram_drafts(tokens, {1, 3, 3}), (std::vector<TokenId>{8, 5, 2}));
  // Suffix "5 2 3" never occurred; n = 2 then.
  EXPECT_EQ(propose_ngram_drafts(tokens, {2, 3, 2}), (std::vector<TokenId>{8, 5}));
  // min 3: no match.
  EXPECT_TRUE(propose_ngram_drafts(tokens, {3, 4, 2}).empty());
  // A longer match wins over a later shorter one: "9 1 2 3 8" vs "3".
  const std::vector<TokenId> longer = {7, 1, 2, 3, 4, 5, 3, 6, 1, 2, 3};
  EXPECT_EQ(propose_ngram_drafts(longer, {1, 3, 2}), (std::vector<TokenId>{4, 5}));
  EXPECT_EQ(propose_ngram_drafts(longer, {1, 1, 2}), (std::vector<TokenId>{6, 1}));
  // A match near the end proposes what follows it, fewer than k; a run predicts itself.
  EXPECT_EQ(propose_ngram_drafts(std::vector<TokenId>{4, 4, 4, 4}, {1, 2, 5}), (std::vector<TokenId>{4}));
  EXPECT_EQ(propose_ngram_drafts(std::vector<TokenId>{5, 6, 5, 6}, {2, 2, 5}), (std::vector<TokenId>{5, 6}));
  EXPECT_TRUE(propose_ngram_drafts(std::vector<TokenId>{5}, {1, 2, 5}).empty());
}

}  // namespace
}  // namespace pagellm
