#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "backend/sampling_math.h"
#include "cache/slot_mapping.h"
#include "runner/sampler.h"

namespace pagellm {

namespace {

// Decode-only steps replay the graph of the smallest bucket that holds their batch; rows past the
// batch are padding (one token that sees no key and writes no cache slot).
constexpr int64_t kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256};

int64_t graph_bucket(int64_t num_seqs) {
  for (int64_t bucket : kGraphBuckets)
    if (num_seqs <= bucket) return bucket;
  return 0;  // larger batches run without a graph
}

// Block-table width of a graph: a power of two, so contexts that grow by a token per step keep
// replaying the same graph for a long while.
int64_t graph_table_width(int64_t max_blocks) {
  int64_t width = 16;
  while (width < max_blocks) width *= 2;
  return width;
}

size_t align16(size_t n) { return (n + 15) & ~size_t{15}; }

// The rows the device cannot sample: penalties need the token history and logprobs the full
// log-softmax, so these copy their logits row to the host and run sample_token.
bool samples_on_host(const SamplingParams& p) { return p.needs_token_history() || p.num_logprobs.has_value(); }

// Rows with temperature > 0 (any top-k / top-p / min-p, seeded or not) that Backend::sample draws
// on the device; greedy rows keep the argmax.
bool samples_on_device(const SamplingParams& p) { return !p.is_greedy() && !samples_on_host(p); }

bool graphs_allowed_by_env() {
  const char* value = std::getenv("PAGELLM_CUDA_GRAPHS");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

}  // namespace

// Byte offsets of one step's inputs in the staging buffers (the host and the device buffer hold the
// same layout, so one copy moves them all; layout of each part in sched/step.h):
//
//   | token_ids i32 [T] | positions i32 [T] | slot_mapping i64 [T] | cu_seqlens_q i32 [B + 1] |
//   | seq_lens_k i32 [B] | logits_rows i32 [R] | block_tables i32 [B, W] |
//   | sample_params [R] sampling::RowParams (24 bytes each) |              (each part 16-byte aligned)
//
// The offsets depend only on (T, B, R, W): a graph captured for a decode bucket (T = B = R) finds
// its inputs at the same device addresses on every replay.
struct ModelRunner::StepLayout {
  int64_t num_tokens, num_seqs, num_logits_rows, table_width;
  size_t token_ids, positions, slot_mapping, cu_seqlens_q, seq_lens_k, logits_rows, block_tables, sample_params,
      total_bytes;

  StepLayout(int64_t t, int64_t b, int64_t r, int64_t w) : num_tokens(t), num_seqs(b), num_logits_rows(r), table_width(w) {
    size_t at = 0;
    auto take = [&](int64_t bytes) {
      const size_t offset = at;
      at = align16(at + static_cast<size_t>(bytes));
      return offset;
    };
    token_ids = take(4 * t);
    positions = take(4 * t);
    slot_mapping = take(8 * t);
    cu_seqlens_q = take(4 * (b + 1));
    seq_lens_k = take(4 * b);
    logits_rows = take(4 * r);
    block_tables = take(4 * b * w);
    sample_params = take(static_cast<int64_t>(sizeof(sampling::RowParams)) * r);
    total_bytes = at;
  }
};

ModelRunner::ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size, int num_state_slots)
    : model_(model), backend_(backend), block_size_(block_size),
      next_seed_state_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
      graphs_enabled_(backend.device() != Device::kCpu && model.is_graph_capturable() && graphs_allowed_by_env()) {
  const MemorySpec spec = model.memory_spec();
  for (int64_t l = 0; l < spec.num_attention_layers; ++l) {
    Tensor k = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    Tensor v = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    caches_.attention_layers.push_back({k.view(), v.view()});
    cache_tensors_.push_back(std::move(k));
    cache_tensors_.push_back(std::move(v));
  }
  if (spec.is_hybrid()) {
    state_slots_ = std::make_unique<StateSlotBinder>(spec, backend, num_state_slots);
    caches_.gdn_layers = state_slots_->cache().views();
  }
}

ModelRunner::~ModelRunner() {
  graphs_.clear();  // before the buffers they point at
}

void ModelRunner::reserve(const StepLayout& layout) {
  bool grew = false;
  if (!staging_host_.defined() || staging_host_.numel() < static_cast<int64_t>(layout.total_bytes)) {
    const int64_t bytes = std::max<int64_t>(static_cast<int64_t>(layout.total_bytes) * 2, int64_t{1} << 16);
    staging_host_ = backend_.alloc_host({bytes}, DType::kU8);
    staging_ = backend_.device() == Device::kCpu ? staging_host_ : backend_.alloc({bytes}, DType::kU8);
    grew = true;
  }
  const int64_t rows = std::max<int64_t>(layout.num_logits_rows, 1);
  if (!logits_.defined() || logits_.size(0) < rows) {
    const int64_t capacity = std::max<int64_t>({rows, logits_.defined() ? 2 * logits_.size(0) : 0, 16});
    logits_ = backend_.alloc({capacity, model_.config().vocab_size}, model_.activation_dtype());
    sampled_ids_ = backend_.alloc({capacity}, DType::kI32);
    sampled_ids_host_ = backend_.alloc_host({capacity}, DType::kI32);
    grew = true;
  }
  if (grew) graphs_.clear();  // they point at the old buffers
}

void ModelRunner::pack(const StepPlan& plan, const StepLayout& layout) {
  char* base = staging_host_.ptr<char>();
  int32_t* token_ids = reinterpret_cast<int32_t*>(base + layout.token_ids);
  int32_t* positions = reinterpret_cast<int32_t*>(base + layout.positions);
  int64_t* slot_mapping = reinterpret_cast<int64_t*>(base + layout.slot_mapping);
  int32_t* cu_seqlens_q = reinterpret_cast<int32_t*>(base + layout.cu_seqlens_q);
  int32_t* seq_lens_k = reinterpret_cast<int32_t*>(base + layout.seq_lens_k);
  int32_t* logits_rows = reinterpret_cast<int32_t*>(base + layout.logits_rows);
  int32_t* block_tables = reinterpret_cast<int32_t*>(base + layout.block_tables);
  auto* sample_params = reinterpret_cast<sampling::RowParams*>(base + layout.sample_params);
  const int64_t width = layout.table_width;
  int32_t token = 0, sampling_row = 0;
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  for (int64_t b = 0; b < num_rows; ++b) {
    const ScheduledRequest& row = plan.rows[static_cast<size_t>(b)];
    cu_seqlens_q[b] = token;
    seq_lens_k[b] = row.context_len();
    int32_t* table = block_tables + b * width;
    CHECK(static_cast<int64_t>(row.block_table.size()) <= width);
    std::copy(row.block_table.begin(), row.block_table.end(), table);
    std::fill(table + row.block_table.size(), table + width, kNoBlock);
    for (int i = 0; i < row.num_new_tokens(); ++i, ++token) {
      const int pos = row.start_pos + i;
      token_ids[token] = row.token_ids[static_cast<size_t>(i)];
      positions[token] = pos;
      slot_mapping[token] = slot_of_position(row.block_table, pos, block_size_);
    }
    if (row.is_sampling) {
      sample_params[sampling_row] = device_sample_params(row);
      logits_rows[sampling_row++] = token - 1;
    }
  }
  // Padding rows of a graph bucket: context 0, so the token sees no key and writes no slot.
  for (int64_t b = num_rows; b < layout.num_seqs; ++b, ++token) {
    cu_seqlens_q[b] = token;
    seq_lens_k[b] = 0;
    std::fill(block_tables + b * width, block_tables + (b + 1) * width, kNoBlock);
    token_ids[token] = 0;
    positions[token] = 0;
    slot_mapping[token] = -1;
    sample_params[sampling_row] = sampling::RowParams{};  // temperature 0: Backend::sample skips it
    logits_rows[sampling_row++] = token;
  }
  cu_seqlens_q[layout.num_seqs] = token;
  CHECK(token == layout.num_tokens && sampling_row == layout.num_logits_rows);
}

StepBatch ModelRunner::device_batch(const StepLayout& layout, int32_t max_seqlen_q, int32_t max_seqlen_k) const {
  char* base = static_cast<char*>(staging_.view().data);
  const Device device = staging_.view().device;
  auto view = [&](size_t offset, Shape shape, DType dtype) { return TensorView(base + offset, shape, dtype, device); };
  StepBatch batch;
  batch.num_tokens = layout.num_tokens;
  batch.num_seqs = layout.num_seqs;
  batch.max_seqlen_q = max_seqlen_q;
  batch.max_seqlen_k = max_seqlen_k;
  batch.token_ids = view(layout.token_ids, {layout.num_tokens}, DType::kI32);
  batch.positions = view(layout.positions, {layout.num_tokens}, DType::kI32);
  batch.slot_mapping = view(layout.slot_mapping, {layout.num_tokens}, DType::kI64);
  batch.cu_seqlens_q = view(layout.cu_seqlens_q, {layout.num_seqs + 1}, DType::kI32);
  batch.seq_lens_k = view(layout.seq_lens_k, {layout.num_seqs}, DType::kI32);
  batch.logits_rows = view(layout.logits_rows, {layout.num_logits_rows}, DType::kI32);
  batch.block_tables = view(layout.block_tables, {layout.num_seqs, layout.table_width}, DType::kI32);
  if (state_slots_) batch.state_slots = state_slots_->device_slots(layout.num_seqs);
  return batch;
}

void ModelRunner::forward_and_argmax(const StepBatch& batch) {
  const int64_t rows = batch.logits_rows.numel();
  const TensorView logits = logits_.view().slice_rows(0, rows);  // [R, vocab]
  model_.forward(batch, caches_, logits);
  if (rows > 0) backend_.argmax(sampled_ids_.view().slice_rows(0, rows), logits);
}

sampling::RowParams ModelRunner::device_sample_params(const ScheduledRequest& row) {
  sampling::RowParams params;  // temperature 0: the row keeps its argmax or is sampled on the host
  const SamplingParams& p = *row.sampling;
  if (!samples_on_device(p)) return params;
  params.temperature = p.temperature;
  params.top_k = p.top_k;
  params.top_p = p.top_p;
  params.min_p = p.min_p;
  params.uniform = counter_uniform(seed_for(row), static_cast<uint64_t>(row.num_output_tokens));
  return params;
}

uint64_t ModelRunner::seed_for(const ScheduledRequest& row) {
  if (row.sampling->seed) return *row.sampling->seed;
  auto [it, inserted] = drawn_seeds_.try_emplace(row.request_id, 0);
  if (inserted) it->second = (next_seed_state_ += 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  return it->second;
}

StepResult ModelRunner::execute(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) drawn_seeds_.erase(id);
  if (state_slots_) state_slots_->bind(plan);
  StepResult result;
  if (plan.empty()) return result;
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  const int64_t num_sampling = plan.num_sampling_rows();
  int64_t max_blocks = 1;
  int32_t max_seqlen_q = 0, max_seqlen_k = 0;
  bool decode_only = true, any_host_sampling = false, any_device_sampling = false;
  for (const ScheduledRequest& row : plan.rows) {
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(row.block_table.size()));
    max_seqlen_q = std::max(max_seqlen_q, static_cast<int32_t>(row.num_new_tokens()));
    max_seqlen_k = std::max(max_seqlen_k, static_cast<int32_t>(row.context_len()));
    decode_only = decode_only && row.num_new_tokens() == 1 && row.is_sampling;
    any_host_sampling = any_host_sampling || (row.is_sampling && samples_on_host(*row.sampling));
    any_device_sampling = any_device_sampling || (row.is_sampling && samples_on_device(*row.sampling));
  }
  const int64_t bucket = graphs_enabled_ && decode_only ? graph_bucket(num_rows) : 0;
  const StepLayout layout = bucket > 0 ? StepLayout(bucket, bucket, bucket, graph_table_width(max_blocks))
                                       : StepLayout(plan.num_scheduled_tokens(), num_rows, num_sampling, max_blocks);
  reserve(layout);
  pack(plan, layout);
  if (state_slots_) state_slots_->upload(layout.num_seqs);
  const int64_t bytes = static_cast<int64_t>(layout.total_bytes);
  if (backend_.device() != Device::kCpu) backend_.copy(staging_.view().slice_rows(0, bytes), staging_host_.view().slice_rows(0, bytes));

  if (bucket > 0) {
    // A graph's launch plan must not depend on this step's contexts: the attention is planned for
    // the longest context the table width allows (max_seqlen_k), and reads the real ones on the device.
    const StepBatch batch = device_batch(layout, 1, static_cast<int32_t>(layout.table_width * block_size_));
    std::unique_ptr<OpGraph>& graph = graphs_[{bucket, layout.table_width}];
    if (graph) {
      graph->replay();
    } else {
      forward_and_argmax(batch);  // also sizes every scratch buffer the capture will name
      graph = backend_.capture([&] { forward_and_argmax(batch); });
    }
  } else {
    forward_and_argmax(device_batch(layout, max_seqlen_q, max_seqlen_k));
  }
  // Outside the graph: a decode graph is the same whichever rows sample, and the sampler needs no
  // host planning. Its parameters came over with the step's one host-to-device copy.
  if (any_device_sampling) {
    const int64_t rows = layout.num_logits_rows;
    const TensorView params(static_cast<char*>(staging_.view().data) + layout.sample_params,
                            {rows, static_cast<int64_t>(sizeof(sampling::RowParams))}, DType::kU8,
                            staging_.view().device);
    backend_.sample(sampled_ids_.view().slice_rows(0, rows), logits_.view().slice_rows(0, rows), params);
  }
  if (num_sampling == 0) {
    // Only prefill chunks this step. Wait anyway: the next step rewrites the staging buffer.
    backend_.synchronize();
    return result;
  }

  // Only the sampled ids cross to the host (argmax or device-sampled), and the logits of rows the
  // host must sample (penalties, logprobs).
  const TensorView ids_host = sampled_ids_host_.view().slice_rows(0, num_sampling);
  backend_.copy(ids_host, sampled_ids_.view().slice_rows(0, num_sampling));
  const int64_t vocab = model_.config().vocab_size;
  if (any_host_sampling) {
    if (!logits_host_.defined() || logits_host_.size(0) < num_sampling)
      logits_host_ = backend_.alloc_host({logits_.size(0), vocab}, logits_.dtype());
    backend_.copy(logits_host_.view().slice_rows(0, num_sampling), logits_.view().slice_rows(0, num_sampling));
  }
  std::vector<float> row_f32(any_host_sampling ? static_cast<size_t>(vocab) : 0);
  const size_t row_bytes = static_cast<size_t>(vocab) * dtype_size_bytes(logits_.dtype());
  int64_t r = 0;
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling) continue;
    if (!samples_on_host(*row.sampling)) {
      result.sampled.push_back({row.request_id, ids_host.ptr<int32_t>()[r], std::nullopt});
      ++r;
      continue;
    }
    convert_to_f32(logits_host_.ptr<char>() + static_cast<size_t>(r) * row_bytes, logits_.dtype(), row_f32.data(),
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
