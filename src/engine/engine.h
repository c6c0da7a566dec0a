// Engine: the only thread-safe class. HTTP threads (or the offline API) submit requests and read
// their OutputChannels; one engine thread owns the scheduler, the KV cache and the model:
//
//   loop:  drain inbox (submit / abort) ─▶ plan = scheduler.schedule() ─▶ runner.launch_forward(plan)
//          ─▶ [grammar rows: commit the running step, fill their masks] ─▶ runner.launch_sampling(plan)
//          ─▶ oldest step done? result = runner.finish(it) ─▶ updates = scheduler.commit(it, result)
//          ─▶ publish(updates): detokenize, stop strings, grammar matchers, channels
//
// With async scheduling (the default on GPUs) a step is committed only once the next one is
// queued behind it, so the host plans, packs and publishes while the device computes: the next
// step's decode inputs are the ids the running step samples, moved on the device (ModelRunner).
// A step with structured-output rows is committed earlier, once the next step's forward is
// queued: the masks of the next step need its tokens, and go in before that step's sampling.
// Without it (the CPU default, --no-async-scheduling) each step is committed right after launch.
// Speculative decoding (--speculative-config) runs synchronous steps: the next step's drafts and
// inputs depend on how many drafts the running step accepts.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/draft_proposer.h"
#include "engine/engine_config.h"
#include "engine/engine_metrics.h"
#include "engine/output_channel.h"
#include "model/model.h"
#include "runner/model_runner.h"
#include "sched/scheduler.h"
#include "structured/structured.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {

struct GenerateRequest {
  std::vector<TokenId> prompt_token_ids;
  SamplingParams sampling;             // eos_token_ids are filled in by the engine
  std::vector<std::string> stop_strings;
  bool skip_special_tokens = true;     // in the streamed text
  bool include_stop_string = false;    // the matched stop string, or a stop token's text, stays in the text
  // Structured outputs: the generated text must match this grammar (Engine::grammar_compiler() made
  // it); each step masks the tokens that would leave it. With async scheduling the mask of a step is
  // filled after the step before is committed, while its forward runs (Engine::step).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // Reasoning first (vLLM's structured outputs with a reasoning parser): the grammar applies only
  // after the output holds this token sequence (the end of the reasoning, e.g. </think>), from the
  // token after it; the reasoning before it is free. Empty: from the first token (no reasoning
  // parser, or the prompt already ended the reasoning).
  std::vector<TokenId> grammar_starts_after;
};

class Engine {
 public:
  // Loads nothing itself: takes a loaded model (on `backend`) and an optional tokenizer.
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config, std::unique_ptr<Backend> backend,
                                                  std::unique_ptr<Model> model,
                                                  std::shared_ptr<const Tokenizer> tokenizer);
  // Loads the model folder (and its tokenizer, when present) on config.device.
  static Expected<std::unique_ptr<Engine>> load(const EngineConfig& config);
  ~Engine();  // stops the engine thread; unfinished requests end with finish_reason abort

  // Validates and queues a request; the channel carries its outputs. Errors (bad params, prompt too
  // long, queue full) come back here, synchronously.
  Expected<std::shared_ptr<OutputChannel>> submit(GenerateRequest request);
  // The same for several requests, queued together: the engine's next step sees all of those that
  // are valid (offline batches and `bench latency` measure one step over the whole batch).
  std::vector<Expected<std::shared_ptr<OutputChannel>>> submit_all(std::vector<GenerateRequest> requests);
  // Ends a request wherever it is; its blocks are freed on the engine thread's next turn.
  void abort(RequestId request_id);

  void start();  // runs the loop on a background thread
  void stop();   // finishes the current step, aborts the rest, joins

  const EngineConfig& config() const { return config_; }
  // The compiler of structured-output constraints over this model's vocabulary (built on first use,
  // about a second for a 150k vocabulary; thread-safe); an error when the model has no tokenizer.
  Expected<structured::GrammarCompiler*> grammar_compiler();
  const ModelConfig& model_config() const { return model_->config(); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelRunner& runner() const { return *runner_; }
  std::shared_ptr<const Tokenizer> shared_tokenizer() const { return tokenizer_; }
  EngineMetrics metrics() const;
  std::vector<float> step_times_s() const;  // each step's wall time, in order (for benchmarks)
  void clear_step_times();
  bool is_running() const { return running_.load(); }
  // Leak check for tests: no live request and every KV block free (valid once idle).
  bool is_idle_and_leak_free() const;

 private:
  struct Live;  // per-request engine-thread state (channel, detokenizer, stop matcher)

  Engine(const EngineConfig& config, std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
         std::shared_ptr<const Tokenizer> tokenizer, int num_blocks, DType kv_cache_dtype);
  void run_loop();
  bool drain_inbox(bool wait);
  void step();
  // Speculative decoding: drafts for the running requests that may speculate (no grammar).
  DraftProposals propose_drafts();
  void finish_oldest_step();  // waits for the oldest launched step, commits and publishes it
  void publish(const std::vector<RequestUpdate>& updates);
  // Stores a step's prompt_logprobs with their requests until their first output goes out.
  void keep_prompt_logprobs(const StepResult& result);
  void end_request(RequestId id, FinishReason reason, Status error);
  // Records the queue time of requests admitted for the first time by this plan.
  void observe_queue_times(const StepPlan& plan, std::chrono::steady_clock::time_point started);
  // Marks the sampling rows of requests with a grammar (ScheduledRequest::needs_token_mask), so the
  // runner lays out their masks before they exist; true when it marked any.
  bool mark_constrained_rows(StepPlan& plan) const;
  // Gives each marked row whose grammar applies the mask of its grammar's next tokens; every step
  // that sampled for the request before is committed.
  void attach_token_masks(StepPlan& plan);

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<DraftProposer> drafter_;  // --speculative-config, else null

  // submit()'s validation, off the lock; then queue() takes the lock once for a whole batch.
  struct Validated {
    std::vector<TokenId> prompt_token_ids;
    SamplingParams sampling;
    std::shared_ptr<Live> live;
  };
  Expected<Validated> validate(GenerateRequest request) const;
  std::vector<Expected<std::shared_ptr<OutputChannel>>> queue(std::vector<Expected<Validated>> validated);

  // Inbox: the only state HTTP threads touch.
  mutable std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::vector<std::pair<Request, std::shared_ptr<Live>>> pending_submits_;
  std::vector<RequestId> pending_aborts_;
  bool stop_requested_ = false;
  RequestId next_request_id_ = 1;
  int num_queued_ = 0;  // submitted and not yet finished (for the waiting-queue bound)

  std::unordered_map<RequestId, std::shared_ptr<Live>> live_;  // engine thread only
  struct LaunchedStep {
    StepPlan plan;
    std::chrono::steady_clock::time_point launched;
  };
  std::deque<LaunchedStep> launched_;  // launched, not committed: at most 2 (async) or 1
  bool async_scheduling_ = false;
  int num_constrained_live_ = 0;  // live requests with a grammar: while none, no row is marked
  std::once_flag grammar_once_;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler_;
  Status grammar_error_;
  std::chrono::steady_clock::time_point last_finish_;
  EngineMetricsRecorder metrics_;
  std::thread thread_;
  std::atomic<bool> running_{false};
};

}  // namespace pagellm
