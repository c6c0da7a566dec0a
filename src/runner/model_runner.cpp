#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>

#include "cache/slot_mapping.h"
#include "runner/sampler.h"

namespace pagellm {

// The host side of a StepBatch (layout in sched/step.h).
struct ModelRunner::HostBatch {
  Tensor token_ids, positions, cu_seqlens_q, seq_lens_k, block_tables, slot_mapping, logits_rows;
  int32_t max_seqlen_q = 0, max_seqlen_k = 0;
};

ModelRunner::ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size)
    : model_(model), backend_(backend), block_size_(block_size),
      next_seed_state_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())) {
  const MemorySpec spec = model.memory_spec();
  for (int64_t l = 0; l < spec.num_attention_layers; ++l) {
    Tensor k = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    Tensor v = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    caches_.attention_layers.push_back({k.view(), v.view()});
    cache_tensors_.push_back(std::move(k));
    cache_tensors_.push_back(std::move(v));
  }
}

ModelRunner::HostBatch ModelRunner::pack(const StepPlan& plan) const {
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  const int64_t num_tokens = plan.num_scheduled_tokens();
  size_t max_blocks = 1;
  for (const ScheduledRequest& row : plan.rows) max_blocks = std::max(max_blocks, row.block_table.size());
  HostBatch host;
  host.token_ids = Tensor::cpu({num_tokens}, DType::kI32);
  host.positions = Tensor::cpu({num_tokens}, DType::kI32);
  host.slot_mapping = Tensor::cpu({num_tokens}, DType::kI64);
  host.cu_seqlens_q = Tensor::cpu({num_rows + 1}, DType::kI32);
  host.seq_lens_k = Tensor::cpu({num_rows}, DType::kI32);
  host.block_tables = Tensor::cpu({num_rows, static_cast<int64_t>(max_blocks)}, DType::kI32);
  host.logits_rows = Tensor::cpu({plan.num_sampling_rows()}, DType::kI32);
  int32_t* block_tables = host.block_tables.ptr<int32_t>();
  std::fill(block_tables, block_tables + host.block_tables.numel(), kNoBlock);
  int32_t token = 0, sampling_row = 0;
  for (int64_t b = 0; b < num_rows; ++b) {
    const ScheduledRequest& row = plan.rows[static_cast<size_t>(b)];
    host.cu_seqlens_q.ptr<int32_t>()[b] = token;
    host.seq_lens_k.ptr<int32_t>()[b] = row.context_len();
    std::copy(row.block_table.begin(), row.block_table.end(), block_tables + b * static_cast<int64_t>(max_blocks));
    for (int i = 0; i < row.num_new_tokens(); ++i, ++token) {
      const int pos = row.start_pos + i;
      host.token_ids.ptr<int32_t>()[token] = row.token_ids[static_cast<size_t>(i)];
      host.positions.ptr<int32_t>()[token] = pos;
      host.slot_mapping.ptr<int64_t>()[token] = slot_of_position(row.block_table, pos, block_size_);
    }
    if (row.is_sampling) host.logits_rows.ptr<int32_t>()[sampling_row++] = token - 1;
    host.max_seqlen_q = std::max(host.max_seqlen_q, static_cast<int32_t>(row.num_new_tokens()));
    host.max_seqlen_k = std::max(host.max_seqlen_k, static_cast<int32_t>(row.context_len()));
  }
  host.cu_seqlens_q.ptr<int32_t>()[num_rows] = token;
  return host;
}

uint64_t ModelRunner::seed_for(const ScheduledRequest& row) {
  if (row.sampling->seed) return *row.sampling->seed;
  auto [it, inserted] = drawn_seeds_.try_emplace(row.request_id, 0);
  if (inserted) it->second = (next_seed_state_ += 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  return it->second;
}

StepResult ModelRunner::execute(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) drawn_seeds_.erase(id);
  StepResult result;
  if (plan.empty()) return result;
  HostBatch host = pack(plan);
  std::vector<Tensor> device;  // host tensors on the CPU; copies elsewhere
  auto to_device = [&](const Tensor& t) -> TensorView {
    if (backend_.device() == Device::kCpu) return t.view();
    device.push_back(backend_.alloc(t.shape(), t.dtype()));
    backend_.copy(device.back().view(), t.view());
    return device.back().view();
  };
  StepBatch batch;
  batch.num_tokens = host.token_ids.numel();
  batch.num_seqs = static_cast<int64_t>(plan.rows.size());
  batch.max_seqlen_q = host.max_seqlen_q;
  batch.max_seqlen_k = host.max_seqlen_k;
  batch.token_ids = to_device(host.token_ids);
  batch.positions = to_device(host.positions);
  batch.cu_seqlens_q = to_device(host.cu_seqlens_q);
  batch.seq_lens_k = to_device(host.seq_lens_k);
  batch.block_tables = to_device(host.block_tables);
  batch.slot_mapping = to_device(host.slot_mapping);
  batch.logits_rows = to_device(host.logits_rows);

  const int64_t num_logits_rows = host.logits_rows.numel();
  if (num_logits_rows == 0) {
    // Only prefill chunks this step: no row samples, but the KV still has to be written.
    Tensor no_logits = backend_.alloc({0, model_.config().vocab_size}, model_.activation_dtype());
    model_.forward(batch, caches_, no_logits.view());
    return result;
  }
  const int64_t vocab = model_.config().vocab_size;
  Tensor logits = backend_.alloc({num_logits_rows, vocab}, model_.activation_dtype());
  model_.forward(batch, caches_, logits.view());
  Tensor logits_host = Tensor::cpu({num_logits_rows, vocab}, logits.dtype());
  backend_.copy(logits_host.view(), logits.view());
  std::vector<float> row_f32(static_cast<size_t>(vocab));
  const size_t row_bytes = static_cast<size_t>(vocab) * dtype_size_bytes(logits.dtype());
  int64_t r = 0;
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling) continue;
    convert_to_f32(logits_host.ptr<char>() + static_cast<size_t>(r) * row_bytes, logits.dtype(), row_f32.data(),
                   row_f32.size());
    SampleInputs inputs;
    inputs.logits = row_f32;
    inputs.params = row.sampling.get();
    inputs.history = row.history_token_ids;
    inputs.num_prompt_tokens = row.num_prompt_tokens;
    inputs.num_output_tokens = row.num_output_tokens;
    inputs.seed = seed_for(row);
    SampleOutput sampled = sample_token(inputs);
    result.sampled.push_back({row.request_id, sampled.token_id, std::move(sampled.logprobs)});
    ++r;
  }
  return result;
}

}  // namespace pagellm
