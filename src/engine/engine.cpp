#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "cache/kv_cache_budget.h"
#include "cache/kv_cache_groups.h"
#include "engine/activation_profile.h"
#include "engine/draft_model_proposer.h"
#include "engine/mtp_proposer.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/state_memory.h"
#include "engine/tensor_parallel_worker.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/stop_strings.h"

namespace pagellm {

using Clock = std::chrono::steady_clock;

namespace {
// Without --kv-cache-memory the CPU backend takes at most this much host RAM for the KV cache.
constexpr int64_t kDefaultCpuKvCacheBytes = int64_t{4} << 30;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Gauges and cumulative scheduler counters; refreshed after every step and after every inbox drain
// (an abort while idle frees blocks without a step, and /metrics must show that).
void record_scheduler_stats(EngineMetrics& m, const SchedulerStats& stats) {
  m.num_running = stats.num_running;
  m.num_waiting = stats.num_waiting;
  m.kv_blocks_used = stats.num_kv_blocks_used;
  m.prefix_cache_query_tokens = static_cast<uint64_t>(stats.prefix_cache_query_tokens);
  m.prefix_cache_hit_tokens = static_cast<uint64_t>(stats.prefix_cache_hit_tokens);
  m.preemptions = static_cast<uint64_t>(stats.num_preemptions);
  m.spec_decode_num_drafts = static_cast<uint64_t>(stats.num_spec_drafts);
  m.spec_decode_num_draft_tokens = static_cast<uint64_t>(stats.num_spec_draft_tokens);
  m.spec_decode_num_accepted_tokens = static_cast<uint64_t>(stats.num_spec_accepted_tokens);
  for (size_t i = 0; i < stats.num_spec_accepted_per_position.size() && i < m.spec_decode_accepted_per_position.size(); ++i)
    m.spec_decode_accepted_per_position[i] = static_cast<uint64_t>(stats.num_spec_accepted_per_position[i]);
}
// Bytes of one KV block of a model with `spec` (every group's layers of it: kv_cache_groups.h).
int64_t block_bytes_of(const MemorySpec& spec, int block_size) {
  const KvCacheGroups groups = kv_cache_groups_of(spec);
  return kv_bytes_per_block(KvBlockShape{static_cast<int>(groups.layers_per_group), block_size,
                                         static_cast<int>(spec.num_kv_heads), static_cast<int>(spec.head_dim),
                                         static_cast<int>(dtype_size_bytes(spec.kv_dtype))});
}

// The draft checkpoint of --speculative-config, on the target's backend in the target's dtype.
Expected<std::unique_ptr<Model>> load_draft_model(const SpeculativeConfig& speculative, Backend& backend,
                                                  const Model& target, const Tokenizer* target_tokenizer) {
  const std::string& dir = speculative.draft_model_dir;
  // The draft would load as a shard of the target's tensor-parallel group without the other ranks.
  if (backend.tensor_parallel_size() > 1)
    return unimplemented("[engine] a draft model with --tensor-parallel-size {} is not supported yet (n-gram "
                         "speculation is)", backend.tensor_parallel_size());
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Model> draft, load_model(dir, backend, target.activation_dtype()));
  std::shared_ptr<const Tokenizer> draft_tokenizer;
  if (target_tokenizer && std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    PAGELLM_ASSIGN_OR_RETURN(draft_tokenizer, Tokenizer::from_dir(dir));
  }
  PAGELLM_RETURN_IF_ERROR(check_draft_model(*draft, target, draft_tokenizer.get(), target_tokenizer));
  LOG_INFO("[engine] speculative decoding: draft model {} ({}), {} drafts per step", dir, draft->config().architecture,
           speculative.num_speculative_tokens);
  return draft;
}
}  // namespace

// Engine-thread state of one live request.
struct Engine::Live {
  std::shared_ptr<OutputChannel> channel;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;  // null without a tokenizer
  std::unique_ptr<StopStringMatcher> stop_matcher;      // null without stop strings
  Clock::time_point submitted, last_token;
  bool has_first_token = false;
  bool was_scheduled = false;
  int num_prompt_tokens = 0;
  int num_output_tokens = 0;
  bool include_stop_string = false;  // also the text of a stop token (EOS, stop_token_ids)
  std::unique_ptr<structured::GrammarMatcher> matcher;  // structured outputs, else null
  // The reasoning's end marker the grammar waits for (GenerateRequest::grammar_starts_after), and
  // the last output tokens, as many as it has; both cleared once the marker was seen.
  std::vector<TokenId> grammar_starts_after, recent_tokens;
  // prompt_logprobs as the steps computed them ([num_prompt_tokens - 1]: prompt tokens 1 ..), sent
  // with the first output.
  std::vector<PromptTokenLogprobs> prompt_logprobs;

  // The matcher constrains this request's next token (it exists, the reasoning is over, and it has
  // not accepted its stop token yet).
  bool grammar_applies() const {
    return matcher && grammar_starts_after.empty() && !matcher->is_terminated();
  }
  // An output token while the grammar waits: true when it completes the reasoning's end marker.
  bool ends_reasoning(TokenId token) {
    recent_tokens.push_back(token);
    if (recent_tokens.size() > grammar_starts_after.size()) recent_tokens.erase(recent_tokens.begin());
    if (recent_tokens != grammar_starts_after) return false;
    grammar_starts_after.clear();
    recent_tokens.clear();
    return true;
  }
};

Expected<std::unique_ptr<Engine>> Engine::load(const EngineConfig& config_in) {
  EngineConfig config = config_in;
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_backend(config.device));
  backend->set_kernel_options(config.kernel_options);  // before the model loads: its ranks copy them
  config.device = backend->name();  // "auto" resolved
  PAGELLM_RETURN_IF_ERROR(check_kv_cache_dtype_name(config.kv_cache_dtype));  // before the slow load
  PAGELLM_ASSIGN_OR_RETURN(const std::optional<DType> dtype, parse_dtype_flag(config.dtype));
  TensorParallelOptions tp{config.tensor_parallel_size, config.tensor_parallel_share_device, config.tp_communicator,
                           std::nullopt};
  PAGELLM_RETURN_IF_ERROR(check_process_group_flags(config));
  if (config.nnodes > 1) {
    if (config.node_rank != 0)
      return invalid_argument("[engine] --node-rank {} runs a shard only (run_tensor_parallel_worker), not an engine",
                              config.node_rank);
    PAGELLM_ASSIGN_OR_RETURN(tp.processes, process_group_options(config));
  }
  PAGELLM_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                           load_model(config.model_dir, *backend, dtype, config.quantization, tp));
  std::shared_ptr<const Tokenizer> tokenizer;
  const std::string& tokenizer_dir = config.tokenizer_dir.empty() ? config.model_dir : config.tokenizer_dir;
  if (!config.tokenizer_dir.empty() || std::filesystem::exists(std::filesystem::path(tokenizer_dir) / "tokenizer.json")) {
    PAGELLM_ASSIGN_OR_RETURN(tokenizer, Tokenizer::from_dir(tokenizer_dir));
  }
  return create(config, std::move(backend), std::move(model), std::move(tokenizer));
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config_in, std::unique_ptr<Backend> backend,
                                                 std::unique_ptr<Model> model,
                                                 std::shared_ptr<const Tokenizer> tokenizer) {
  EngineConfig config = config_in;
  if (config.block_size < 1 || config.block_size > 1024)
    return invalid_argument("[engine] --block-size must be in [1, 1024], got {}", config.block_size);
  if (config.long_prefill_token_threshold < 0 || config.max_num_partial_prefills < 0 || config.max_long_partial_prefills < 0)
    return invalid_argument("[engine] --long-prefill-token-threshold, --max-num-partial-prefills and "
                            "--max-long-partial-prefills must be >= 0, got {}, {} and {}",
                            config.long_prefill_token_threshold, config.max_num_partial_prefills,
                            config.max_long_partial_prefills);
  if (config.max_num_partial_prefills > 0 && config.max_long_partial_prefills > config.max_num_partial_prefills)
    return invalid_argument("[engine] --max-long-partial-prefills {} must not exceed --max-num-partial-prefills {}",
                            config.max_long_partial_prefills, config.max_num_partial_prefills);
  MemorySpec spec = model->memory_spec();
  // A hybrid model's speculative row must run the recurrent form, which keeps the state after each draft.
  if (spec.is_hybrid() && config.speculative.num_speculative_tokens + 1 >= kGdnMinChunkedTokens)
    return invalid_argument("[engine] --speculative-config: num_speculative_tokens {} is too many for the hybrid "
                            "(Gated DeltaNet) model {}: at most {}", config.speculative.num_speculative_tokens,
                            model->config().architecture, kGdnMinChunkedTokens - 2);
  // The KV cache's dtype: the budget counts its bytes (an FP8 cache gets twice the blocks of bf16).
  PAGELLM_ASSIGN_OR_RETURN(spec.kv_dtype, resolve_kv_cache_dtype(config.kv_cache_dtype, spec.kv_dtype));
  // Sliding-window layers get KV cache groups of their own: a block id holds layers_per_group layers.
  const KvCacheGroups groups = kv_cache_groups_of(spec);
  // Tensor-parallel ranks sharing one memory each keep a cache of this shape (cache_copies).
  int64_t bytes_per_block = block_bytes_of(spec, config.block_size) * spec.cache_copies;
  // A draft model keeps its own cache of as many blocks: each block of the budget pays for both.
  std::unique_ptr<Model> draft;
  if (config.speculative.method == SpeculativeMethod::kDraftModel) {
    PAGELLM_ASSIGN_OR_RETURN(draft, load_draft_model(config.speculative, *backend, *model, tokenizer.get()));
    bytes_per_block += block_bytes_of(draft->memory_spec(), config.block_size);
  }
  // An MTP head likewise keeps its one attention layer's cache of as many blocks.
  std::unique_ptr<MtpModel> mtp_head;
  if (config.speculative.method == SpeculativeMethod::kMtp) {
    PAGELLM_ASSIGN_OR_RETURN(mtp_head, load_mtp_model(*model, config.model_dir, *backend));
    bytes_per_block += block_bytes_of(mtp_head->memory_spec(), config.block_size);
    LOG_INFO("[engine] speculative decoding: the checkpoint's MTP head, {} drafts per step",
             config.speculative.num_speculative_tokens);
  }
  int64_t budget = config.kv_cache_memory_bytes;
  if (budget <= 0 && backend->device() == Device::kCpu) {
    const int64_t free_bytes = backend->free_memory_bytes();
    if (free_bytes <= 0) return invalid_argument("[engine] cannot tell free memory: give --kv-cache-memory BYTES");
    budget = std::min<int64_t>(free_bytes / 4, kDefaultCpuKvCacheBytes);
  } else if (budget <= 0) {
    // A GPU: the fraction of the memory left after the weights and the measured activations.
    PAGELLM_ASSIGN_OR_RETURN(const ActivationProfile profile, profile_activations(*model, *backend, config));
    budget = static_cast<int64_t>(static_cast<double>(profile.free_after_bytes) * config.gpu_memory_utilization);
    LOG_INFO("[engine] activation workspace {:.1f} MiB (measured on a {}-token step); KV cache budget {:.2f} GiB = "
             "{} x {:.2f} GiB free", static_cast<double>(profile.workspace_bytes) / (1 << 20),
             config.max_num_batched_tokens, static_cast<double>(budget) / (1 << 30), config.gpu_memory_utilization,
             static_cast<double>(profile.free_after_bytes) / (1 << 30));
  }
  PAGELLM_ASSIGN_OR_RETURN(budget, reserve_state_memory(spec, config, budget));  // hybrid models
  // A hybrid draft's recurrent states: a chain of 1 + k per request that speculates (draft_model_proposer.h),
  // for as many requests as a quarter of the budget holds (the others decode without drafts).
  int draft_chains = config.max_num_seqs;
  if (draft && draft->memory_spec().is_hybrid()) {
    const int k = config.speculative.num_speculative_tokens;
    draft_chains = draft_state_chains(*draft, k, budget, config.max_num_seqs);
    const int64_t draft_states = draft_state_bytes(*draft, draft_chains, k);
    if (draft_states >= budget)
      return invalid_argument("[engine] the hybrid draft model's recurrent states take {} bytes for one request, more "
                              "than the {}-byte budget leaves", draft_states, budget);
    budget -= draft_states;
    LOG_INFO("[engine] hybrid draft: recurrent states for {} requests at a time ({:.1f} MiB); others decode without "
             "drafts", draft_chains, static_cast<double>(draft_states) / (1 << 20));
  }
  const int64_t num_blocks = num_kv_blocks_for_budget(budget, bytes_per_block);
  if (num_blocks < 1)
    return invalid_argument("[engine] the KV cache budget of {} bytes holds no block of {} bytes", budget,
                            bytes_per_block);
  const int64_t model_limit = model->config().max_position_embeddings > 0 ? model->config().max_position_embeddings : 4096;
  // The longest request the whole cache holds alone (a sliding group holds its window, not its length).
  const int max_step_tokens = config.long_prefill_token_threshold > 0
                                  ? std::min(config.long_prefill_token_threshold, config.max_num_batched_tokens)
                                  : config.max_num_batched_tokens;
  const int64_t cache_tokens =
      max_tokens_for_blocks(groups.windows, num_blocks, config.block_size, std::max(max_step_tokens, 1),
                            std::max<int64_t>({model_limit, config.max_model_len, num_blocks * config.block_size}));
  if (config.max_model_len <= 0) config.max_model_len = static_cast<int>(std::min(model_limit, cache_tokens));
  // Concurrent partial prefills need a length past which a prompt is long: vLLM's default, 4% of
  // max_model_len (also for --max-long-partial-prefills alone, which would otherwise do nothing). A
  // lower per-step cap than the one sized above only lowers what a request needs.
  if ((config.max_num_partial_prefills > 1 || config.max_long_partial_prefills > 0) &&
      config.long_prefill_token_threshold == 0) {
    config.long_prefill_token_threshold = std::max(1, config.max_model_len * 4 / 100);
    LOG_INFO("[engine] concurrent partial prefills: long prompts are those past {} tokens (4% of max_model_len)",
             config.long_prefill_token_threshold);
  }
  if (config.max_model_len > cache_tokens)
    return invalid_argument("[engine] max_model_len {} needs more KV cache than the budget gives ({} tokens); "
                            "lower --max-model-len or raise --kv-cache-memory", config.max_model_len, cache_tokens);
  LOG_INFO("{}", kv_cache_groups_summary(groups.windows, groups.layers_per_group, num_blocks, config.block_size,
                                         bytes_per_block, config.max_model_len, std::max(max_step_tokens, 1)));
  auto engine = std::unique_ptr<Engine>(new Engine(config, std::move(backend), std::move(model), std::move(tokenizer),
                                                   static_cast<int>(num_blocks), spec.kv_dtype));
  PAGELLM_RETURN_IF_ERROR(engine->scheduler_->config().validate());
  if (draft)
    engine->drafter_ = std::make_unique<DraftModelProposer>(std::move(draft), *engine->backend_, static_cast<int>(num_blocks),
                                                            config.block_size, config.speculative.num_speculative_tokens,
                                                            draft_chains);
  if (mtp_head)
    engine->drafter_ = std::make_unique<MtpProposer>(std::move(mtp_head), *engine->backend_, static_cast<int>(num_blocks),
                                                     config.block_size, config.speculative.num_speculative_tokens);
  const auto capture_started = Clock::now();
  const int num_graphs =
      engine->runner_->capture_decode_graphs(config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len);
  if (num_graphs > 0)
    LOG_INFO("[engine] captured {} decode graphs (batch buckets up to {}, contexts up to {} tokens) in {:.2f} s",
             num_graphs, config.max_num_seqs, config.max_model_len, seconds_between(capture_started, Clock::now()));
  return engine;
}

Engine::Engine(const EngineConfig& config, std::unique_ptr<Backend> backend, std::unique_ptr<Model> model,
               std::shared_ptr<const Tokenizer> tokenizer, int num_blocks, DType kv_cache_dtype)
    : config_(config), backend_(std::move(backend)), model_(std::move(model)), tokenizer_(std::move(tokenizer)) {
  SchedulerConfig sched;
  sched.max_num_seqs = config.max_num_seqs;
  sched.max_num_batched_tokens = config.max_num_batched_tokens;
  sched.block_size = config.block_size;
  sched.num_blocks = num_blocks;
  sched.max_model_len = config.max_model_len;
  sched.enable_prefix_caching = config.enable_prefix_caching;
  sched.long_prefill_token_threshold = config.long_prefill_token_threshold;
  sched.max_num_partial_prefills = config.max_num_partial_prefills;
  sched.max_long_partial_prefills = config.max_long_partial_prefills;
  sched.kv_group_windows = kv_cache_groups_of(model_->memory_spec()).windows;
  if (model_->memory_spec().is_hybrid()) {  // GDN chunks and prefix-cache checkpoints (engine/state_memory.h)
    sched.gdn_chunk_tokens = kGdnChunkTokens;
    sched.num_state_checkpoints = config.num_state_checkpoints;
    sched.checkpoint_interval_tokens = config.hybrid_checkpoint_interval_blocks * config.block_size;
    sched.min_recompute_tokens = kGdnMinChunkedTokens;
  }
  CHECK_MSG(sched.validate().is_ok(), "{}", sched.validate().message());
  scheduler_ = std::make_unique<Scheduler>(sched);
  runner_ = std::make_unique<ModelRunner>(*model_, *backend_, num_blocks, config.block_size, config.max_num_seqs,
                                          kv_cache_dtype, config.num_state_checkpoints,
                                          state_drafts_per_request(config));
  if (config.seed) runner_->set_seed_stream(*config.seed);
  async_scheduling_ =
      config.async_scheduling < 0 ? backend_->device() != Device::kCpu : config.async_scheduling != 0;
  if (config.speculative.enabled()) {
    if (async_scheduling_) LOG_INFO("[engine] speculative decoding runs synchronous steps (async scheduling off)");
    async_scheduling_ = false;
    const SpeculativeConfig& spec = config.speculative;
    if (spec.method == SpeculativeMethod::kNgram)
      drafter_ = std::make_unique<NgramDraftProposer>(
          NgramLookup{spec.prompt_lookup_min, spec.prompt_lookup_max, spec.num_speculative_tokens});
  }
  metrics_.update([&](EngineMetrics& m) {
    m.kv_blocks_total = num_blocks;
    m.block_size = config.block_size;
    m.spec_decode_accepted_per_position.assign(static_cast<size_t>(config.speculative.num_speculative_tokens), 0);
  });
}

Engine::~Engine() { stop(); }

Expected<Engine::Validated> Engine::validate(GenerateRequest request) const {
  const ModelConfig& mc = model_->config();
  SamplingParams& sampling = request.sampling;
  for (int64_t id : mc.eos_token_ids) sampling.eos_token_ids.push_back(static_cast<TokenId>(id));
  PAGELLM_RETURN_IF_ERROR(sampling.validate());
  if (request.prompt_token_ids.empty()) return invalid_argument("[engine] the prompt is empty");
  for (TokenId id : request.prompt_token_ids)
    if (id < 0 || id >= mc.vocab_size)
      return invalid_argument("[engine] prompt token id {} is outside the vocabulary (vocab_size {})", id,
                              mc.vocab_size);
  for (const auto& [token, bias] : sampling.logit_bias)
    if (token < 0 || token >= mc.vocab_size || !std::isfinite(bias))
      return invalid_argument("[engine] logit_bias token {} is outside the vocabulary (vocab_size {}) or its bias is not "
                              "finite", token, mc.vocab_size);
  const int64_t total = static_cast<int64_t>(request.prompt_token_ids.size()) + sampling.max_tokens;
  if (total > config_.max_model_len)
    return invalid_argument("[engine] prompt of {} tokens + max_tokens {} = {} exceeds max_model_len {}",
                            request.prompt_token_ids.size(), sampling.max_tokens, total, config_.max_model_len);
  auto live = std::make_shared<Live>();
  live->submitted = Clock::now();
  live->num_prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  live->include_stop_string = request.include_stop_string;
  if (request.sampling.num_prompt_logprobs)
    live->prompt_logprobs.resize(request.prompt_token_ids.size() - 1);
  if (request.grammar) {
    live->matcher = std::make_unique<structured::GrammarMatcher>(request.grammar);
    live->grammar_starts_after = std::move(request.grammar_starts_after);
  }
  if (tokenizer_) live->detokenizer = std::make_unique<IncrementalDetokenizer>(tokenizer_, request.skip_special_tokens);
  if (!request.stop_strings.empty()) {
    if (!tokenizer_) return invalid_argument("[engine] stop strings need a tokenizer; this model has none");
    live->stop_matcher = std::make_unique<StopStringMatcher>(request.stop_strings, request.include_stop_string);
  }
  return Validated{std::move(request.prompt_token_ids), std::move(sampling), std::move(live)};
}

std::vector<Expected<std::shared_ptr<OutputChannel>>> Engine::queue(std::vector<Expected<Validated>> validated) {
  std::vector<Expected<std::shared_ptr<OutputChannel>>> channels;
  channels.reserve(validated.size());
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    for (auto& item : validated) {
      if (!item.has_value()) {
        channels.push_back(item.status());
        continue;
      }
      if (stop_requested_) {
        channels.push_back(Status(StatusCode::kUnavailable, "[engine] shutting down"));
        continue;
      }
      if (num_queued_ >= config_.max_waiting) {
        channels.push_back(Status(StatusCode::kUnavailable,
                                  fmt::format("[engine] too many requests in flight ({}); retry later", num_queued_)));
        continue;
      }
      Validated& v = *item;
      const RequestId id = next_request_id_++;
      v.live->channel = std::make_shared<OutputChannel>(id);
      ++num_queued_;
      channels.push_back(v.live->channel);
      pending_submits_.emplace_back(Request(id, std::move(v.prompt_token_ids), std::move(v.sampling)), v.live);
    }
  }
  inbox_ready_.notify_one();
  return channels;
}

Expected<std::shared_ptr<OutputChannel>> Engine::submit(GenerateRequest request) {
  std::vector<Expected<Validated>> one;
  one.push_back(validate(std::move(request)));
  return std::move(queue(std::move(one)).front());
}

std::vector<Expected<std::shared_ptr<OutputChannel>>> Engine::submit_all(std::vector<GenerateRequest> requests) {
  std::vector<Expected<Validated>> validated;
  validated.reserve(requests.size());
  for (GenerateRequest& request : requests) validated.push_back(validate(std::move(request)));
  return queue(std::move(validated));
}

void Engine::abort(RequestId request_id) {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    pending_aborts_.push_back(request_id);
  }
  inbox_ready_.notify_one();
}

void Engine::start() {
  if (running_.exchange(true)) return;
  thread_ = std::thread([this] { run_loop(); });
}

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    stop_requested_ = true;
  }
  inbox_ready_.notify_one();
  if (thread_.joinable()) thread_.join();
  running_ = false;
}

bool Engine::drain_inbox(bool wait) {
  std::vector<std::pair<Request, std::shared_ptr<Live>>> submits;
  std::vector<RequestId> aborts;
  bool stopping;
  {
    std::unique_lock<std::mutex> lock(inbox_mutex_);
    if (wait)
      inbox_ready_.wait(lock, [this] { return stop_requested_ || !pending_submits_.empty() || !pending_aborts_.empty(); });
    submits.swap(pending_submits_);
    aborts.swap(pending_aborts_);
    stopping = stop_requested_;
  }
  for (auto& [request, live] : submits) {
    const RequestId id = request.id();
    live_[id] = live;
    if (live->matcher) ++num_constrained_live_;
    Status added = scheduler_->add(std::move(request));
    if (!added.is_ok()) end_request(id, FinishReason::kAbort, added);
  }
  for (RequestId id : aborts) {
    if (scheduler_->abort(id).is_ok()) end_request(id, FinishReason::kAbort, Status::ok());
  }
  if (!submits.empty() || !aborts.empty()) {
    const SchedulerStats stats = scheduler_->stats();
    metrics_.update([&](EngineMetrics& m) { record_scheduler_stats(m, stats); });
  }
  return !stopping;
}

void Engine::run_loop() {
  while (drain_inbox(/*wait=*/!scheduler_->has_unfinished_requests() && launched_.empty())) step();
  while (!launched_.empty()) finish_oldest_step();
  // Shutdown: everything still live ends as aborted.
  std::vector<RequestId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (RequestId id : ids) {
    (void)scheduler_->abort(id);
    end_request(id, FinishReason::kAbort, Status::ok());
  }
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  for (auto& [request, live] : pending_submits_) {
    RequestOutput out;
    out.finish_reason = FinishReason::kAbort;
    live->channel->push(std::move(out));
  }
  pending_submits_.clear();
}

void Engine::step() {
  const auto started = Clock::now();
  StepPlan plan;
  if (scheduler_->has_unfinished_requests()) {
    const DraftProposals drafts = drafter_ ? propose_drafts() : DraftProposals{};
    plan = scheduler_->schedule(drafter_ ? &drafts : nullptr);
    if (drafter_)
      for (RequestId id : plan.preempted_request_ids) drafter_->forget(id);
  }
  const bool has_masks = num_constrained_live_ > 0 && mark_constrained_rows(plan);
  observe_queue_times(plan, started);
  runner_->launch_forward(plan);  // an empty plan launches nothing (it drops finished requests' state)
  // A grammar's mask needs the token the running step samples, the forward does not: that step is
  // committed (its matchers advance) while this one's forward runs, then the masks go in.
  if (has_masks) {
    if (!launched_.empty()) finish_oldest_step();
    attach_token_masks(plan);
  }
  runner_->launch_sampling(plan);
  const bool launched = !plan.empty();
  if (launched) launched_.push_back({std::move(plan), started});
  // Async: the oldest step is committed once the next is queued behind it (or nothing more could
  // be planned), so the device never waits for the host. A request that finishes at that commit
  // (EOS, a stop string, its grammar's end) may have a row in the next step: that row runs and
  // commit() drops it.
  if (!launched_.empty() && (!async_scheduling_ || launched_.size() == 2 || !launched)) finish_oldest_step();
}

DraftProposals Engine::propose_drafts() {
  std::vector<const Request*> requests;
  for (const Request* request : scheduler_->running_requests()) {
    if (request->num_missing_tokens() != 1 || request->num_output_placeholders() > 0) continue;
    // Constrained requests decode without drafts: a draft's mask would need the grammar advanced
    // over the drafts before it.
    const auto it = live_.find(request->id());
    if (it == live_.end() || it->second->matcher) continue;
    requests.push_back(request);
  }
  return requests.empty() ? DraftProposals{} : drafter_->propose(requests);
}

void Engine::observe_queue_times(const StepPlan& plan, Clock::time_point started) {
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_new) continue;
    auto it = live_.find(row.request_id);
    if (it == live_.end() || it->second->was_scheduled) continue;
    it->second->was_scheduled = true;  // queue time ends at the first admission, not after preemptions
    metrics_.update([&](EngineMetrics& m) {
      m.queue_time.observe(seconds_between(it->second->submitted, started));
    });
  }
}

bool Engine::mark_constrained_rows(StepPlan& plan) const {
  // Every sampling row of a request with a grammar, whatever its matcher's state: whether the
  // reasoning ends or the grammar terminates at the running step is known only at its commit.
  bool any = false;
  for (ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling) continue;
    const auto it = live_.find(row.request_id);
    row.needs_token_mask = it != live_.end() && it->second->matcher != nullptr;
    any = any || row.needs_token_mask;
  }
  return any;
}

void Engine::attach_token_masks(StepPlan& plan) {
  const size_t words = static_cast<size_t>((model_->config().vocab_size + 31) / 32);
  std::vector<std::pair<ScheduledRequest*, structured::GrammarMatcher*>> constrained;
  for (ScheduledRequest& row : plan.rows) {
    if (!row.needs_token_mask) continue;
    const auto it = live_.find(row.request_id);
    // No mask (all ones): a request that finished at the commit just made (its row runs, commit()
    // drops it), a finished grammar (its stop token accepted, ignore_eos set) that constrains
    // nothing more, or one that waits for the reasoning's end and constrains nothing yet.
    if (it == live_.end() || !it->second->grammar_applies()) continue;
    constrained.emplace_back(&row, it->second->matcher.get());
  }
  // Each request's matcher is its own (their compiled grammars' caches are thread-safe): the masks
  // of a batch are filled in parallel, off the engine thread's critical path as far as cores allow.
  ThreadPool::global().parallel_for(static_cast<int64_t>(constrained.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      auto [row, matcher] = constrained[static_cast<size_t>(i)];
      auto mask = std::make_shared<std::vector<uint32_t>>(std::max(words, matcher->mask_words()), 0u);
      matcher->fill_next_token_bitmask(*mask);
      row->token_mask = std::move(mask);
    }
  });
}

Expected<structured::GrammarCompiler*> Engine::grammar_compiler() {
  std::call_once(grammar_once_, [this] {
    if (!tokenizer_) {
      grammar_error_ = invalid_argument("[structured] this model has no tokenizer: constrained outputs need one");
      return;
    }
    std::vector<int32_t> eos_ids;
    for (int64_t id : model_->config().eos_token_ids) eos_ids.push_back(static_cast<int32_t>(id));
    auto vocab = structured::TokenVocabulary::from_tokenizer(*tokenizer_, eos_ids);
    if (!vocab.has_value()) {
      grammar_error_ = vocab.status();
      return;
    }
    grammar_compiler_ = std::make_unique<structured::GrammarCompiler>(std::move(vocab).value());
  });
  if (!grammar_compiler_) return grammar_error_;
  return grammar_compiler_.get();
}

void Engine::finish_oldest_step() {
  LaunchedStep oldest = std::move(launched_.front());
  launched_.pop_front();
  StepResult result = runner_->finish(oldest.plan);
  keep_prompt_logprobs(result);
  std::vector<RequestUpdate> updates = scheduler_->commit(oldest.plan, result);
  // Speculative steps run synchronously: the target's last forward is this step's (an MTP head reads it).
  if (drafter_) drafter_->after_step(oldest.plan, [&](RequestId id) { return scheduler_->find(id); });
  // A step's time: from its launch, or from the previous step's end when it queued behind it.
  const auto now = Clock::now();
  const double step_s = seconds_between(std::max(oldest.launched, last_finish_), now);
  last_finish_ = now;
  // Step time and gauges are recorded before publishing, so whoever receives a request's last
  // output already sees the step that produced it counted.
  const SchedulerStats stats = scheduler_->stats();
  metrics_.update([&](EngineMetrics& m) {
    record_scheduler_stats(m, stats);
    ++m.steps;
    m.step_time_total_s += step_s;
    m.step_time.observe(step_s);
  });
  metrics_.record_step_time(step_s);
  publish(updates);
}

void Engine::keep_prompt_logprobs(const StepResult& result) {
  for (const PromptLogprobs& rows : result.prompt_logprobs) {
    const auto it = live_.find(rows.request_id);
    if (it == live_.end()) continue;
    std::vector<PromptTokenLogprobs>& kept = it->second->prompt_logprobs;
    // A position computed again after a preemption gives the same numbers: the later copy stays.
    for (size_t i = 0; i < rows.tokens.size(); ++i) {
      const size_t at = static_cast<size_t>(rows.first_prompt_index) - 1 + i;
      if (at < kept.size()) kept[at] = rows.tokens[i];
    }
  }
}

void Engine::publish(const std::vector<RequestUpdate>& updates) {
  const auto now = Clock::now();
  for (const RequestUpdate& update : updates) {
    auto it = live_.find(update.request_id);
    if (it == live_.end()) continue;
    Live& live = *it->second;
    RequestOutput out;
    out.num_prompt_tokens = update.num_prompt_tokens;
    out.num_output_tokens = update.num_output_tokens;
    out.num_cached_tokens = update.num_prefix_cached_tokens;
    std::optional<FinishReason> finish = update.finish_reason;
    if (update.new_token_id) {
      const TokenId token = *update.new_token_id;
      // The mask allowed only what the grammar accepts; a refusal means the mask and the matcher
      // disagree, which ends the request rather than emit text that breaks the format.
      // While the model reasons the grammar waits; the end marker's tokens are no part of the answer.
      if (live.matcher && !live.grammar_starts_after.empty()) {
        (void)live.ends_reasoning(token);
      } else if (live.grammar_applies() && !live.matcher->accept_token(token) && !finish) {
        (void)scheduler_->finish_early(update.request_id, FinishReason::kAbort);
        finish = FinishReason::kAbort;
      }
      out.token_ids.push_back(token);
      if (update.logprobs) out.logprobs.push_back(*update.logprobs);
      if (!live.has_first_token) out.prompt_logprobs = std::move(live.prompt_logprobs);
      metrics_.update([&](EngineMetrics& m) {
        ++m.generation_tokens;
        if (!live.has_first_token) {
          m.ttft.observe(seconds_between(live.submitted, now));
          m.prompt_tokens += static_cast<uint64_t>(live.num_prompt_tokens);
        } else {
          m.inter_token.observe(seconds_between(live.last_token, now));
        }
      });
      ++live.num_output_tokens;
      live.has_first_token = true;
      live.last_token = now;
      if (live.detokenizer) {
        // The token that stopped the request (the scheduler stops on EOS and stop_token_ids) is no
        // part of the answer's text unless asked, as in vLLM: it shows when special tokens are
        // kept (tool and reasoning parsers that read them) or for a stop id of an ordinary token.
        const bool is_stop_token = update.finish_reason == FinishReason::kStop;
        std::string delta = is_stop_token && !live.include_stop_string ? std::string() : live.detokenizer->feed(token);
        if (finish) delta += live.detokenizer->finish();
        if (live.stop_matcher) {
          StopStringMatcher::Result matched = live.stop_matcher->feed(delta);
          out.text = std::move(matched.text);
          if (matched.stopped) {
            out.stop_string_index = matched.stop_index;
            if (!finish) (void)scheduler_->finish_early(update.request_id, FinishReason::kStop);
            finish = FinishReason::kStop;
          } else if (finish) {
            out.text += live.stop_matcher->finish();
          }
        } else {
          out.text = std::move(delta);
        }
      }
    }
    if (finish) {
      out.finish_reason = finish;
      runner_->release_state(update.request_id);  // before the caller can see the finish
      if (drafter_) drafter_->forget(update.request_id);
      live.channel->push(std::move(out));
      end_request(update.request_id, *finish, Status::ok());
    } else {
      live.channel->push(std::move(out));
    }
  }
}

void Engine::end_request(RequestId id, FinishReason reason, Status error) {
  runner_->release_state(id);  // hybrid models: at once, not at the next plan (there may be none)
  if (drafter_) drafter_->forget(id);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  std::shared_ptr<Live> live = it->second;
  live_.erase(it);
  if (live->matcher) --num_constrained_live_;
  if (!live->channel->finished()) {
    RequestOutput out;
    out.finish_reason = reason;
    out.error = std::move(error);
    live->channel->push(std::move(out));  // ignored when the last output was already pushed
  }
  metrics_.update([&](EngineMetrics& m) {
    m.e2e.observe(seconds_between(live->submitted, Clock::now()));
    m.request_prompt_tokens.observe(live->num_prompt_tokens);
    m.request_generation_tokens.observe(live->num_output_tokens);
    if (reason == FinishReason::kStop) ++m.finished_stop;
    else if (reason == FinishReason::kLength) ++m.finished_length;
    else ++m.finished_abort;
  });
  std::lock_guard<std::mutex> lock(inbox_mutex_);
  --num_queued_;
}

EngineMetrics Engine::metrics() const { return metrics_.snapshot(); }

std::vector<float> Engine::step_times_s() const { return metrics_.step_times_s(); }

void Engine::clear_step_times() { metrics_.clear_step_times(); }

bool Engine::is_idle_and_leak_free() const {
  return scheduler_->is_leak_free() && runner_->num_state_slots_in_use() == 0 && (!drafter_ || drafter_->is_idle());
}

}  // namespace pagellm
