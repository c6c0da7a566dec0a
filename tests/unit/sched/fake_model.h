// A fake model for scheduler tests: it owns a paged "KV cache" whose slots hold (token, position)
// and executes StepPlans like a real runner would (write every row's KV first, then read each
// sampling row's whole context through its block table). The next token is a hash of the context it
// reads back, so a wrong block table, a stale prefix hit or a block reused while still referenced
// changes the output — and outputs must match an unconstrained run exactly.
//
// With KV cache groups (windows: kFullAttention or a sliding window per group), every row writes its
// new tokens through each group's table, and every query row reads its visible keys through each
// group's table: all of [0, context) in a full group, the last W positions in a sliding one. The next
// token hashes what the last query read through every group, so a block a sliding group released too
// early (kNoBlock: slot_of_position CHECKs) or a table of the wrong group shows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cache/slot_mapping.h"
#include "sched/scheduler.h"

namespace pagellm::testing {

struct KvEntry {
  TokenId token_id = -1;
  int pos = -1;
};

class FakeModel {
 public:
  FakeModel(int num_blocks, int block_size, std::vector<int32_t> windows = {})
      : block_size_(block_size),
        windows_(windows.empty() ? std::vector<int32_t>{kFullAttention} : std::move(windows)),
        kv_(static_cast<size_t>(num_blocks) * block_size) {}

  // Tokens this fake emits never collide with small ids tests reserve for EOS / stop tokens.
  static constexpr TokenId kMinToken = 100;

  // Steps run in the order they are given (as on a device stream). A kPlaceholderToken input is
  // the token the previous step sampled for that request, as the runner takes it from the device.
  StepResult execute(const StepPlan& plan) {
    EXPECT_EQ(plan.block_size, block_size_);
    for (const ScheduledRequest& row : plan.rows) {  // write_kv for the whole batch first
      EXPECT_EQ(row.block_tables.size(), windows_.size());
      std::vector<std::vector<int64_t>> slots(windows_.size());
      for (size_t g = 0; g < windows_.size(); ++g)
        append_slot_mapping(row.block_tables[g], row.start_pos, row.num_new_tokens(), block_size_, slots[g]);
      for (int i = 0; i < row.num_new_tokens(); ++i) {
        TokenId token = row.token_ids[i];
        if (token == kPlaceholderToken) {
          EXPECT_EQ(i, row.num_new_tokens() - 1) << "a placeholder is only ever a row's last token";
          const auto it = last_sampled_.find(row.request_id);
          EXPECT_NE(it, last_sampled_.end()) << "request " << row.request_id << ": placeholder without a sample";
          if (it != last_sampled_.end()) token = it->second;
          ++num_placeholder_inputs_;
        }
        for (size_t g = 0; g < windows_.size(); ++g) kv_.at(slots[g][i]) = {token, row.start_pos + i};
      }
    }
    last_sampled_.clear();
    StepResult result;
    for (const ScheduledRequest& row : plan.rows) {  // then "attention" + sampling
      // Every query row's visible keys, through every group: the union is [begin, context_len).
      std::vector<std::vector<TokenId>> read(windows_.size());
      for (size_t g = 0; g < windows_.size(); ++g) {
        const int begin = windows_[g] == kFullAttention ? 0 : std::max(0, row.start_pos - windows_[g] + 1);
        for (int pos = begin; pos < row.context_len(); ++pos) {
          const KvEntry& e = kv_.at(slot_of_position(row.block_tables[g], pos, block_size_));
          EXPECT_EQ(e.pos, pos) << "request " << row.request_id << " group " << g
                                << " reads a slot written for another position";
          read[g].push_back(e.token_id);
        }
      }
      if (!row.is_sampling) continue;
      // The last query's view in each group: the tail of what that group read. A speculative row
      // samples after each of its last 1 + k positions (the context up to and including it).
      for (int i = 0; i <= row.num_draft_tokens; ++i) {
        const int context_len = row.context_len() - row.num_draft_tokens + i;
        result.sampled.push_back({row.request_id, next_token_of_reads(read, context_len, row.context_len()), std::nullopt});
      }
      last_sampled_[row.request_id] = result.sampled.back().token_id;
    }
    return result;
  }
  int64_t num_placeholder_inputs() const { return num_placeholder_inputs_; }

  // The "model": a function of what the last query sees (FNV-1a over each group's visible tokens in
  // group order), like attention over the earlier tokens: the whole context with one full group.
  static TokenId next_token(const std::vector<TokenId>& context, const std::vector<int32_t>& windows = {}) {
    uint64_t h = 1469598103934665603ull;
    const std::vector<int32_t> groups = windows.empty() ? std::vector<int32_t>{kFullAttention} : windows;
    const int len = static_cast<int>(context.size());
    for (int32_t window : groups) {
      const int begin = window == kFullAttention ? 0 : std::max(0, len - window);
      for (int pos = begin; pos < len; ++pos) h = (h ^ static_cast<uint64_t>(context[pos])) * 1099511628211ull;
    }
    return kMinToken + static_cast<TokenId>((h >> 17) % 30000);
  }

  // What an unconstrained, unbatched run produces: greedy continuation of `prompt`.
  static std::vector<TokenId> reference_output(const std::vector<TokenId>& prompt, int num_tokens,
                                               const std::vector<int32_t>& windows = {}) {
    std::vector<TokenId> context = prompt;
    std::vector<TokenId> output;
    for (int i = 0; i < num_tokens; ++i) {
      output.push_back(next_token(context, windows));
      context.push_back(output.back());
    }
    return output;
  }

 private:
  // next_token over the tokens each group read (up to read_end) for a query whose context is
  // context_len long.
  TokenId next_token_of_reads(const std::vector<std::vector<TokenId>>& read, int context_len, int read_end) const {
    uint64_t h = 1469598103934665603ull;
    for (size_t g = 0; g < windows_.size(); ++g) {
      const int begin = windows_[g] == kFullAttention ? 0 : std::max(0, context_len - windows_[g]);
      const std::vector<TokenId>& tokens = read[g];
      // read[g] covers [first, first + tokens.size()) ⊇ the positions up to context_len.
      const int first = read_end - static_cast<int>(tokens.size());
      EXPECT_LE(first, begin);
      for (int pos = begin; pos < context_len; ++pos)
        h = (h ^ static_cast<uint64_t>(tokens[static_cast<size_t>(pos - first)])) * 1099511628211ull;
    }
    return kMinToken + static_cast<TokenId>((h >> 17) % 30000);
  }

  int block_size_;
  std::vector<int32_t> windows_;  // [G]
  std::vector<KvEntry> kv_;  // [num_blocks * block_size]
  std::map<RequestId, TokenId> last_sampled_;  // the previous step's samples ("device-side ids")
  int64_t num_placeholder_inputs_ = 0;
};

struct RunOutcome {
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::map<RequestId, FinishReason> finish_reasons;
  int64_t num_steps = 0;
};

// Checks the plan against the scheduler's limits.
inline void expect_plan_within_limits(const StepPlan& plan, const SchedulerConfig& config) {
  EXPECT_LE(plan.num_scheduled_tokens(), config.max_num_batched_tokens);
  EXPECT_LE(static_cast<int>(plan.rows.size()), config.max_num_seqs);
  for (const ScheduledRequest& row : plan.rows) {
    EXPECT_GT(row.num_new_tokens(), 0);
    for (const std::vector<BlockId>& table : row.block_tables)
      EXPECT_GE(static_cast<int>(table.size()), num_blocks_for_tokens(row.context_len(), config.block_size));
  }
}

enum class Planning { kSync, kAsync };

// Steps until every request has finished; collects outputs from the updates. kAsync plans step
// N+1 before committing step N, as the engine does with a GPU.
inline RunOutcome run_to_completion(Scheduler& scheduler, FakeModel& model, Planning planning = Planning::kSync,
                                    int64_t max_steps = 10'000'000) {
  RunOutcome outcome;
  std::optional<std::pair<StepPlan, StepResult>> in_flight;
  auto commit = [&](const StepPlan& plan, const StepResult& result) {
    for (const RequestUpdate& update : scheduler.commit(plan, result)) {
      if (update.new_token_id) outcome.outputs[update.request_id].push_back(*update.new_token_id);
      if (update.finish_reason) outcome.finish_reasons[update.request_id] = *update.finish_reason;
    }
  };
  while ((scheduler.has_unfinished_requests() || in_flight) && outcome.num_steps < max_steps) {
    StepPlan plan = scheduler.has_unfinished_requests() ? scheduler.schedule() : StepPlan{};
    expect_plan_within_limits(plan, scheduler.config());
    const StepResult result = plan.empty() ? StepResult{} : model.execute(plan);
    if (planning == Planning::kSync) {
      commit(plan, result);
    } else {
      if (in_flight) commit(in_flight->first, in_flight->second);
      in_flight.reset();
      if (!plan.empty()) in_flight.emplace(std::move(plan), result);
    }
    ++outcome.num_steps;
  }
  EXPECT_FALSE(scheduler.has_unfinished_requests()) << "did not finish in " << max_steps << " steps";
  return outcome;
}

inline SamplingParams greedy(int max_tokens, bool ignore_eos = true) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  params.ignore_eos = ignore_eos;
  return params;
}

// Prompt ids first, first + 1, ... (num_tokens of them).
inline std::vector<TokenId> prompt_of(int num_tokens, TokenId first = 1000) {
  std::vector<TokenId> tokens(static_cast<size_t>(num_tokens));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

}  // namespace pagellm::testing
