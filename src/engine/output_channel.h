// OutputChannel: one request's stream of outputs, from the engine thread to whoever waits for it
// (an HTTP handler, the offline API). The engine pushes; the consumer pops; either side may close.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/request.h"
#include "sched/step.h"

namespace pagellm {

// What one engine step produced for one request (token-granular; text may be held back).
struct RequestOutput {
  std::vector<TokenId> token_ids;          // new tokens
  std::string text;                        // new text (empty without a tokenizer)
  std::vector<SampledLogprobs> logprobs;   // one per new token, when asked
  // prompt_logprobs, in the request's first output (with its first token): entry i is prompt token
  // i + 1 given the tokens before it (prompt token 0 has none). Empty otherwise.
  std::vector<PromptTokenLogprobs> prompt_logprobs;
  std::optional<FinishReason> finish_reason;  // set on the last output
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;               // total so far
  int num_cached_tokens = 0;               // prefix-cache hit
  Status error;                            // the request failed (then finish_reason is kAbort)
  int stop_string_index = -1;              // the stop string that ended it (GenerateRequest::stop_strings), else -1
};

class OutputChannel {
 public:
  explicit OutputChannel(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  void push(RequestOutput output);
  // Blocks until an output is there; nullopt once the last output was taken.
  std::optional<RequestOutput> next();
  // Like next() but returns nullopt after `timeout_ms` without news (check finished()).
  std::optional<RequestOutput> next_for(int timeout_ms);
  bool finished() const;

 private:
  RequestId id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestOutput> queue_;
  bool closed_ = false;  // the last output has been pushed
};

}  // namespace pagellm
