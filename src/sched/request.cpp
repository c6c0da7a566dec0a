#include "sched/request.h"

#include <algorithm>

#include "core/check.h"

namespace pagellm {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "unknown";
}

std::string_view request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kPreempted: return "preempted";
    case RequestStatus::kFinishedStopped: return "finished_stopped";
    case RequestStatus::kFinishedLength: return "finished_length";
    case RequestStatus::kFinishedAborted: return "finished_aborted";
  }
  return "unknown";
}

bool is_finished(RequestStatus status) {
  return status == RequestStatus::kFinishedStopped || status == RequestStatus::kFinishedLength ||
         status == RequestStatus::kFinishedAborted;
}

RequestStatus finished_status(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return RequestStatus::kFinishedStopped;
    case FinishReason::kLength: return RequestStatus::kFinishedLength;
    case FinishReason::kAbort: return RequestStatus::kFinishedAborted;
  }
  return RequestStatus::kFinishedAborted;
}

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f)) return invalid_argument("[sampling] temperature must be >= 0, got {}", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return invalid_argument("[sampling] top_p must be in (0, 1], got {}", top_p);
  if (top_k < -1) return invalid_argument("[sampling] top_k must be -1, 0 or positive, got {}", top_k);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return invalid_argument("[sampling] min_p must be in [0, 1], got {}", min_p);
  if (max_tokens < 1) return invalid_argument("[sampling] max_tokens must be >= 1, got {}", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return invalid_argument("[sampling] min_tokens must be in [0, max_tokens={}], got {}", max_tokens,
                            min_tokens);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return invalid_argument("[sampling] presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return invalid_argument("[sampling] frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  // Logits are divided by it in float: smaller penalties overflow them to inf.
  if (!(repetition_penalty >= 1e-6f && repetition_penalty <= 1e6f)) {
    return invalid_argument("[sampling] repetition_penalty must be in [1e-06, 1e+06], got {}", repetition_penalty);
  }
  if (num_logprobs && *num_logprobs < 0) {
    return invalid_argument("[sampling] logprobs must be >= 0, got {}", *num_logprobs);
  }
  // The runner returns at most 20 alternatives per position (spec/serving.md's logprobs bound).
  if (num_prompt_logprobs && (*num_prompt_logprobs < 0 || *num_prompt_logprobs > 20)) {
    return invalid_argument("[sampling] prompt_logprobs must be in [0, 20], got {}", *num_prompt_logprobs);
  }
  return Status::ok();
}

Request::Request(RequestId id, std::vector<TokenId> prompt_token_ids, SamplingParams sampling)
    : id_(id),
      token_ids_(std::move(prompt_token_ids)),
      num_prompt_tokens_(static_cast<int>(token_ids_.size())),
      sampling_(std::make_shared<const SamplingParams>(std::move(sampling))) {}

std::span<const TokenId> Request::prompt_token_ids() const {
  return std::span<const TokenId>(token_ids_).first(num_prompt_tokens_);
}

std::span<const TokenId> Request::output_token_ids() const {
  return std::span<const TokenId>(token_ids_).subspan(num_prompt_tokens_);
}

std::optional<FinishReason> Request::stop_reason() const {
  if (num_output_tokens() == 0) return std::nullopt;
  const SamplingParams& params = *sampling_;
  const TokenId last = token_ids_.back();
  const auto contains = [last](const std::vector<TokenId>& ids) {
    return std::find(ids.begin(), ids.end(), last) != ids.end();
  };
  if (num_output_tokens() >= params.min_tokens) {
    if (!params.ignore_eos && contains(params.eos_token_ids)) return FinishReason::kStop;
    if (contains(params.stop_token_ids)) return FinishReason::kStop;
  }
  if (num_output_tokens() >= params.max_tokens) return FinishReason::kLength;
  return std::nullopt;
}

void Request::admit(int num_prefix_cached_tokens) {
  CHECK_MSG(status_ == RequestStatus::kWaiting || status_ == RequestStatus::kPreempted,
            "admit request {} in state {}", id_, request_status_name(status_));
  CHECK_MSG(num_output_placeholders_ == 0, "admit request {} while a step samples for it", id_);
  CHECK(num_prefix_cached_tokens >= 0 && num_prefix_cached_tokens < num_tokens());
  status_ = RequestStatus::kRunning;
  num_tokens_computed_ = num_prefix_cached_tokens;
  num_prefix_cached_tokens_ = num_prefix_cached_tokens;
}

void Request::preempt() {
  CHECK_MSG(status_ == RequestStatus::kRunning, "preempt request {} in state {}", id_,
            request_status_name(status_));
  status_ = RequestStatus::kPreempted;
  num_tokens_computed_ = 0;
  num_draft_tokens_in_flight_ = 0;
  ++num_preemptions_;
}

void Request::schedule_tokens(int num_tokens, bool is_sampling, int num_draft_tokens) {
  CHECK(status_ == RequestStatus::kRunning);
  CHECK_MSG(num_draft_tokens == 0 || (is_sampling && num_draft_tokens_in_flight_ == 0 && num_draft_tokens < num_tokens),
            "request {}: {} drafts in a row of {} tokens", id_, num_draft_tokens, num_tokens);
  num_draft_tokens_in_flight_ = num_draft_tokens;
  CHECK_MSG(num_tokens > 0 && num_tokens_computed_ + num_tokens <= num_planned_tokens(),
            "request {}: {} computed + {} new > {} tokens", id_, num_tokens_computed_, num_tokens,
            num_planned_tokens());
  num_tokens_computed_ += num_tokens;
  if (is_sampling) {
    CHECK_MSG(num_tokens_computed_ == num_planned_tokens(), "request {} samples with {} of {} tokens computed", id_,
              num_tokens_computed_, num_planned_tokens());
    ++num_output_placeholders_;
  }
}

int Request::append_outputs(std::span<const TokenId> token_ids) {
  CHECK(status_ == RequestStatus::kRunning || status_ == RequestStatus::kPreempted);
  CHECK_MSG(num_output_placeholders_ > 0, "request {} gets a token no step sampled", id_);
  const int num_accepted = static_cast<int>(token_ids.size()) - 1;
  CHECK_MSG(num_accepted >= 0 && num_accepted <= num_draft_tokens_in_flight_, "request {}: {} tokens for {} drafts", id_,
            token_ids.size(), num_draft_tokens_in_flight_);
  --num_output_placeholders_;
  // The rejected drafts' KV is dropped; a preempted request has none to drop.
  if (status_ == RequestStatus::kRunning) num_tokens_computed_ -= num_draft_tokens_in_flight_ - num_accepted;
  num_draft_tokens_in_flight_ = 0;
  int appended = 0;
  for (TokenId token_id : token_ids) {
    token_ids_.push_back(token_id);
    ++appended;
    if (stop_reason()) break;
  }
  // Stopped at an accepted draft: the tokens after it were never outputs.
  if (appended < static_cast<int>(token_ids.size())) num_tokens_computed_ = std::min(num_tokens_computed_, num_tokens());
  return appended;
}

void Request::finish(FinishReason reason) {
  CHECK_MSG(!is_finished(status_), "request {} finishes twice", id_);
  status_ = finished_status(reason);
}

}  // namespace pagellm
