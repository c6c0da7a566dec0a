#include <gtest/gtest.h>

#include "sched/request.h"

namespace pagellm {
namespace {

constexpr TokenId kEos = 2;

// A running request whose prompt is scheduled in one step that samples (one placeholder).
Request running_request(SamplingParams params) {
  params.eos_token_ids = {kEos};
  Request request(1, {10, 11, 12}, std::move(params));
  request.admit(0);
  request.schedule_tokens(3, /*is_sampling=*/true);
  return request;
}

// Commits the pending sample as `token`; unless that stops it, the next step (a decode) is scheduled.
std::optional<FinishReason> sample(Request& request, TokenId token) {
  request.append_output(token);
  const auto reason = request.stop_reason();
  if (!reason) request.schedule_tokens(1, /*is_sampling=*/true);
  return reason;
}

TEST(Request, TokensArePromptThenOutputs) {
  SamplingParams params;
  params.max_tokens = 5;
  Request request = running_request(params);
  EXPECT_EQ(request.num_output_placeholders(), 1);
  EXPECT_EQ(request.num_planned_tokens(), 4);
  EXPECT_EQ(request.num_missing_tokens(), 1);  // the placeholder: the input of the next decode
  EXPECT_EQ(sample(request, 50), std::nullopt);
  EXPECT_EQ(request.num_tokens(), 4);
  EXPECT_EQ(request.num_prompt_tokens(), 3);
  EXPECT_EQ(request.output_token_ids().size(), 1u);
  EXPECT_EQ(request.output_token_ids()[0], 50);
  EXPECT_EQ(request.token_ids().back(), 50);
}

TEST(Request, EosStops) {
  SamplingParams params;
  params.max_tokens = 5;
  Request request = running_request(params);
  EXPECT_EQ(sample(request, 50), std::nullopt);
  EXPECT_EQ(sample(request, kEos), FinishReason::kStop);
}

TEST(Request, IgnoreEosRunsToMaxTokens) {
  SamplingParams params;
  params.max_tokens = 2;
  params.ignore_eos = true;
  Request request = running_request(params);
  EXPECT_EQ(sample(request, kEos), std::nullopt);
  EXPECT_EQ(sample(request, kEos), FinishReason::kLength);
}

TEST(Request, StopTokenIdsStopEvenWithIgnoreEos) {
  SamplingParams params;
  params.max_tokens = 5;
  params.ignore_eos = true;
  params.stop_token_ids = {77};
  Request request = running_request(params);
  EXPECT_EQ(sample(request, 76), std::nullopt);
  EXPECT_EQ(sample(request, 77), FinishReason::kStop);
}

TEST(Request, MinTokensHoldsOffEosAndStopIds) {
  SamplingParams params;
  params.max_tokens = 5;
  params.min_tokens = 3;
  params.stop_token_ids = {77};
  Request request = running_request(params);
  EXPECT_EQ(sample(request, kEos), std::nullopt);
  EXPECT_EQ(sample(request, 77), std::nullopt);
  EXPECT_EQ(sample(request, kEos), FinishReason::kStop);  // third output: allowed now
}

TEST(Request, StopBeatsLengthOnTheLastToken) {
  SamplingParams params;
  params.max_tokens = 1;
  Request request = running_request(params);
  EXPECT_EQ(sample(request, kEos), FinishReason::kStop);
}

TEST(Request, PreemptKeepsOutputsAndRestartsComputation) {
  SamplingParams params;
  params.max_tokens = 5;
  Request request = running_request(params);
  request.append_output(60);  // committed; no next step scheduled yet
  request.preempt();
  EXPECT_EQ(request.status(), RequestStatus::kPreempted);
  EXPECT_EQ(request.num_tokens_computed(), 0);
  EXPECT_EQ(request.num_missing_tokens(), 4);  // prompt + the output, recomputed as one prompt
  EXPECT_EQ(request.num_output_tokens(), 1);
  EXPECT_EQ(request.num_preemptions(), 1);
}

// Preempted while a planned-ahead step samples for it: the sampled token still lands, and the
// request resumes over prompt + every output.
TEST(Request, PreemptedWithAStepInFlightKeepsItsToken) {
  SamplingParams params;
  params.max_tokens = 5;
  Request request = running_request(params);
  EXPECT_EQ(sample(request, 60), std::nullopt);  // the decode after it is in flight
  request.preempt();
  EXPECT_EQ(request.num_output_placeholders(), 1);
  request.append_output(61);
  EXPECT_EQ(request.num_output_placeholders(), 0);
  EXPECT_EQ(request.num_missing_tokens(), 5);
  request.admit(0);
  request.schedule_tokens(5, /*is_sampling=*/true);
  EXPECT_EQ(request.num_output_placeholders(), 1);
}

TEST(SamplingParams, Validate) {
  SamplingParams params;
  EXPECT_TRUE(params.validate().is_ok());
  params.top_p = 1.5f;
  EXPECT_EQ(params.validate().message(), "[sampling] top_p must be in (0, 1], got 1.5");
  params = SamplingParams();
  params.max_tokens = 0;
  EXPECT_FALSE(params.validate().is_ok());
  params = SamplingParams();
  params.min_tokens = 20;
  params.max_tokens = 10;
  EXPECT_FALSE(params.validate().is_ok());
}

TEST(FinishReason, Names) {
  EXPECT_EQ(finish_reason_name(FinishReason::kStop), "stop");
  EXPECT_EQ(finish_reason_name(FinishReason::kLength), "length");
  EXPECT_EQ(finish_reason_name(FinishReason::kAbort), "abort");
}

}  // namespace
}  // namespace pagellm
