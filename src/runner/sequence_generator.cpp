#include "runner/sequence_generator.h"

#include <algorithm>
#include <memory>

#include "cache/state_cache.h"

namespace pagellm {

namespace {

// Host tensors of one step for a single sequence whose tokens [start, start + n) are computed.
struct SingleSequenceStep {
  Tensor token_ids, positions, cu_seqlens_q, seq_lens_k, block_tables, slot_mapping, logits_rows;
  Tensor state_slots;  // [1] i32: slot 0 of a one-slot state cache (hybrid models)

  SingleSequenceStep(const std::vector<int32_t>& tokens, int64_t start) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    token_ids = Tensor::cpu({n}, DType::kI32);
    positions = Tensor::cpu({n}, DType::kI32);
    slot_mapping = Tensor::cpu({n}, DType::kI64);
    for (int64_t i = 0; i < n; ++i) {
      token_ids.ptr<int32_t>()[i] = tokens[static_cast<size_t>(i)];
      positions.ptr<int32_t>()[i] = static_cast<int32_t>(start + i);
      slot_mapping.ptr<int64_t>()[i] = start + i;  // block 0 holds the whole sequence
    }
    cu_seqlens_q = Tensor::cpu({2}, DType::kI32);
    cu_seqlens_q.ptr<int32_t>()[1] = static_cast<int32_t>(n);
    seq_lens_k = Tensor::cpu({1}, DType::kI32);
    seq_lens_k.ptr<int32_t>()[0] = static_cast<int32_t>(start + n);
    block_tables = Tensor::cpu({1, 1}, DType::kI32);
    logits_rows = Tensor::cpu({1}, DType::kI32);
    logits_rows.ptr<int32_t>()[0] = static_cast<int32_t>(n - 1);
    state_slots = Tensor::cpu({1}, DType::kI32);
  }
};

// Copies host step tensors to the backend and describes them as a StepBatch.
class DeviceStep {
 public:
  DeviceStep(Backend& backend, const SingleSequenceStep& host, int64_t start) {
    const Tensor* sources[] = {&host.token_ids, &host.positions, &host.cu_seqlens_q, &host.seq_lens_k,
                               &host.block_tables, &host.slot_mapping, &host.logits_rows, &host.state_slots};
    for (const Tensor* src : sources) {
      if (backend.device() == Device::kCpu) {
        tensors_.push_back(*src);
      } else {
        tensors_.push_back(backend.alloc(src->shape(), src->dtype()));
        backend.copy(tensors_.back().view(), src->view());
      }
    }
    batch.num_tokens = host.token_ids.numel();
    batch.num_seqs = 1;
    batch.max_seqlen_q = static_cast<int32_t>(batch.num_tokens);
    batch.max_seqlen_k = static_cast<int32_t>(start + batch.num_tokens);
    batch.token_ids = tensors_[0];
    batch.positions = tensors_[1];
    batch.cu_seqlens_q = tensors_[2];
    batch.seq_lens_k = tensors_[3];
    batch.block_tables = tensors_[4];
    batch.slot_mapping = tensors_[5];
    batch.logits_rows = tensors_[6];
    batch.state_slots = tensors_[7];
  }
  StepBatch batch;

 private:
  std::vector<Tensor> tensors_;
};

// EOS (unless ignore_eos) or a stop token id, once min_tokens are out (the scheduler's rule too).
bool is_stop_token(const SamplingParams& sampling, int32_t id, int num_output_tokens) {
  if (num_output_tokens < sampling.min_tokens) return false;
  auto contains = [id](const std::vector<TokenId>& ids) { return std::find(ids.begin(), ids.end(), id) != ids.end(); };
  return (!sampling.ignore_eos && contains(sampling.eos_token_ids)) || contains(sampling.stop_token_ids);
}

}  // namespace

Expected<SequenceOutput> generate_sequence(Model& model, Backend& backend, const std::vector<int32_t>& prompt_ids,
                                           const SequenceOptions& options) {
  const ModelConfig& config = model.config();
  if (prompt_ids.empty()) return invalid_argument("[generate] the prompt is empty");
  PAGELLM_RETURN_IF_ERROR(options.sampling.validate());
  const SamplingParams& sampling = options.sampling;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= config.vocab_size)
      return invalid_argument("[generate] prompt token id {} is outside the vocabulary (vocab_size {})", id,
                              config.vocab_size);
  const int64_t capacity = static_cast<int64_t>(prompt_ids.size()) + sampling.max_tokens;
  const MemorySpec spec = model.memory_spec();
  std::vector<Tensor> cache_tensors;
  CacheViews caches;
  for (int64_t l = 0; l < spec.num_attention_layers; ++l) {
    cache_tensors.push_back(backend.alloc({1, capacity, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype));
    cache_tensors.push_back(backend.alloc({1, capacity, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype));
    caches.attention_layers.push_back({cache_tensors[cache_tensors.size() - 2], cache_tensors.back()});
  }
  // Hybrid models: the GDN state of this one sequence, in slot 0, zeroed.
  std::unique_ptr<StateCache> state;
  if (spec.is_hybrid()) {
    state = std::make_unique<StateCache>(spec, backend, 1);
    CHECK(state->acquire(0) == 0);
    caches.gdn_layers = state->views();
  }
  const int64_t vocab = config.vocab_size;
  Tensor logits = backend.alloc({1, vocab}, model.activation_dtype());
  Tensor logits_host = Tensor::cpu({1, vocab}, model.activation_dtype());
  std::vector<float> row(static_cast<size_t>(vocab));
  SequenceOutput out;
  std::vector<int32_t> history = prompt_ids;
  std::vector<int32_t> pending = prompt_ids;
  int64_t start = 0;
  for (int step = 0; step < sampling.max_tokens; ++step) {
    SingleSequenceStep host(pending, start);
    DeviceStep device(backend, host, start);
    model.forward(device.batch, caches, logits.view());
    backend.copy(logits_host.view(), logits.view());
    convert_to_f32(logits_host.ptr<void>(), logits_host.dtype(), row.data(), row.size());
    if (step == 0) out.prompt_logits = row;
    SampleInputs inputs;
    inputs.logits = row;
    inputs.params = &sampling;
    inputs.history = history;
    inputs.num_prompt_tokens = static_cast<int>(prompt_ids.size());
    inputs.num_output_tokens = step;
    inputs.seed = sampling.seed.value_or(options.seed);
    SampleOutput sampled = sample_token(inputs);
    const int32_t next = sampled.token_id;
    out.token_ids.push_back(next);
    history.push_back(next);
    if (sampled.logprobs) out.logprobs.push_back(std::move(*sampled.logprobs));
    start += static_cast<int64_t>(pending.size());
    pending = {next};
    if (is_stop_token(sampling, next, static_cast<int>(out.token_ids.size()))) {
      out.finish_reason = FinishReason::kStop;
      break;
    }
  }
  return out;
}

}  // namespace pagellm
