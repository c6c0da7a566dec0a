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

// Every row samples on the device (sample_token stays as the CPU reference the tests hold the
// device ops to). A row with penalties samples from its penalised f32 copy (Backend::apply_penalties):
// its argmax and draw run there, and its id lands after the R ids of the unpenalised rows.
bool has_penalties(const SamplingParams& p) { return p.needs_token_history(); }

// The top entries a row asks for, as the device returns them (spec/serving.md allows 20; the
// server never asks for more, the CLI's --logprobs is capped here).
int32_t num_top_logprobs(const SamplingParams& p) {
  return std::clamp(p.num_logprobs.value_or(0), 0, sampling::kMaxTopLogprobs);
}

constexpr int64_t kLogprobColumns = 1 + sampling::kMaxTopLogprobs;  // the sampled token, then the top entries

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
//   | penalty_rows [P] sampling::PenaltyRow (32 B) | penalty_params [P] RowParams |
//   | logprob_rows [L] sampling::LogprobRow (12 B) | history i32 [H] |
//
// P rows have penalties (history: their prompt + output ids back to back, H in all), L rows want
// logprobs. The offsets of the first eight parts depend only on (T, B, R, W): a graph captured for
// a decode bucket (T = B = R) finds its inputs at the same device addresses on every replay; the
// last four are read only by the sampling ops that run after it.
//
// Sampled ids on the device, [R + P] i32: ids[r] for sampling row r (argmax, or Backend::sample's
// draw), ids[R + p] for penalised row p (the argmax or draw over its penalised copy).
struct ModelRunner::StepLayout {
  int64_t num_tokens, num_seqs, num_logits_rows, table_width, num_penalised, num_logprob_rows, num_history_ids;
  size_t token_ids, positions, slot_mapping, cu_seqlens_q, seq_lens_k, logits_rows, block_tables, sample_params,
      penalty_rows, penalty_params, logprob_rows, history, total_bytes;

  StepLayout(int64_t t, int64_t b, int64_t r, int64_t w, int64_t p, int64_t l, int64_t h)
      : num_tokens(t), num_seqs(b), num_logits_rows(r), table_width(w), num_penalised(p), num_logprob_rows(l),
        num_history_ids(h) {
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
    penalty_rows = take(static_cast<int64_t>(sizeof(sampling::PenaltyRow)) * p);
    penalty_params = take(static_cast<int64_t>(sizeof(sampling::RowParams)) * p);
    logprob_rows = take(static_cast<int64_t>(sizeof(sampling::LogprobRow)) * l);
    history = take(4 * h);
    total_bytes = at;
  }
  int64_t num_ids() const { return num_logits_rows + num_penalised; }
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
    sampled_ids_ = backend_.alloc({2 * capacity}, DType::kI32);  // R + P <= 2R
    sampled_ids_host_ = backend_.alloc_host({2 * capacity}, DType::kI32);
    grew = true;
  }
  if (grew) graphs_.clear();  // they point at the old buffers
  // Read only by the sampling ops after a graph's replay: growing them keeps the graphs.
  if (layout.num_penalised > 0 && (!penalised_logits_.defined() || penalised_logits_.size(0) < layout.num_penalised)) {
    const int64_t capacity = std::max<int64_t>(
        {layout.num_penalised, penalised_logits_.defined() ? 2 * penalised_logits_.size(0) : 0, 4});
    penalised_logits_ = backend_.alloc({capacity, model_.config().vocab_size}, DType::kF32);
  }
  if (layout.num_logprob_rows > 0 &&
      (!logprob_ids_.defined() || logprob_ids_.size(0) < layout.num_logprob_rows)) {
    const int64_t capacity = std::max<int64_t>(
        {layout.num_logprob_rows, logprob_ids_.defined() ? 2 * logprob_ids_.size(0) : 0, 16});
    logprob_ids_ = backend_.alloc({capacity, kLogprobColumns}, DType::kI32);
    logprob_values_ = backend_.alloc({capacity, kLogprobColumns}, DType::kF32);
    logprob_ids_host_ = backend_.alloc_host({capacity, kLogprobColumns}, DType::kI32);
    logprob_values_host_ = backend_.alloc_host({capacity, kLogprobColumns}, DType::kF32);
  }
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
  auto* penalty_rows = reinterpret_cast<sampling::PenaltyRow*>(base + layout.penalty_rows);
  auto* penalty_params = reinterpret_cast<sampling::RowParams*>(base + layout.penalty_params);
  auto* logprob_rows = reinterpret_cast<sampling::LogprobRow*>(base + layout.logprob_rows);
  int32_t* history = reinterpret_cast<int32_t*>(base + layout.history);
  const int64_t width = layout.table_width;
  int32_t token = 0, sampling_row = 0, penalised_row = 0, logprob_row = 0, history_ids = 0;
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
    if (!row.is_sampling) continue;
    const SamplingParams& p = *row.sampling;
    int32_t id_index = sampling_row;
    if (has_penalties(p)) {
      // Its draw runs on the penalised copy; the raw row keeps its argmax (unused) and is not drawn.
      sample_params[sampling_row] = sampling::RowParams{};
      penalty_params[penalised_row] = device_sample_params(row);
      sampling::PenaltyRow& penalty = penalty_rows[penalised_row];
      penalty = sampling::PenaltyRow{};
      penalty.logits_row = sampling_row;
      penalty.history_offset = history_ids;
      // sample_token's split: the first num_prompt_tokens ids are the prompt, the rest outputs.
      const int32_t num_history = static_cast<int32_t>(row.history_token_ids.size());
      penalty.num_prompt_tokens = std::min(row.num_prompt_tokens, num_history);
      penalty.num_output_tokens = num_history - penalty.num_prompt_tokens;
      penalty.repetition_penalty = p.repetition_penalty;
      penalty.presence_penalty = p.presence_penalty;
      penalty.frequency_penalty = p.frequency_penalty;
      std::copy(row.history_token_ids.begin(), row.history_token_ids.end(), history + history_ids);
      history_ids += num_history;
      id_index = static_cast<int32_t>(layout.num_logits_rows) + penalised_row++;
    } else {
      sample_params[sampling_row] = device_sample_params(row);
    }
    if (p.num_logprobs.has_value()) logprob_rows[logprob_row++] = {sampling_row, id_index, num_top_logprobs(p)};
    logits_rows[sampling_row++] = token - 1;
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
  CHECK(penalised_row == layout.num_penalised && logprob_row == layout.num_logprob_rows &&
        history_ids == layout.num_history_ids);
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
  sampling::RowParams params;  // temperature 0: the row keeps its argmax
  const SamplingParams& p = *row.sampling;
  if (p.is_greedy()) return params;
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

void ModelRunner::launch(const StepPlan& plan) {
  CHECK_MSG(!launched_, "[runner] launch() of a step before finish() of the previous one");
  for (RequestId id : plan.finished_request_ids) drawn_seeds_.erase(id);
  if (state_slots_) state_slots_->bind(plan);
  if (plan.empty()) return;
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  const int64_t num_sampling = plan.num_sampling_rows();
  int64_t max_blocks = 1, num_penalised = 0, num_logprob_rows = 0, num_history_ids = 0;
  int32_t max_seqlen_q = 0, max_seqlen_k = 0;
  bool decode_only = true;
  for (const ScheduledRequest& row : plan.rows) {
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(row.block_table.size()));
    max_seqlen_q = std::max(max_seqlen_q, static_cast<int32_t>(row.num_new_tokens()));
    max_seqlen_k = std::max(max_seqlen_k, static_cast<int32_t>(row.context_len()));
    decode_only = decode_only && row.num_new_tokens() == 1 && row.is_sampling;
    if (!row.is_sampling) continue;
    if (has_penalties(*row.sampling)) {
      ++num_penalised;
      num_history_ids += static_cast<int64_t>(row.history_token_ids.size());
    }
    if (row.sampling->num_logprobs.has_value()) ++num_logprob_rows;
  }
  const int64_t bucket = graphs_enabled_ && decode_only ? graph_bucket(num_rows) : 0;
  const StepLayout layout =
      bucket > 0 ? StepLayout(bucket, bucket, bucket, graph_table_width(max_blocks), num_penalised, num_logprob_rows,
                              num_history_ids)
                 : StepLayout(plan.num_scheduled_tokens(), num_rows, num_sampling, max_blocks, num_penalised,
                              num_logprob_rows, num_history_ids);
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
  if (num_sampling > 0) sample_after_forward(plan, layout);
  if (launched_layout_) *launched_layout_ = layout;
  else launched_layout_ = std::make_unique<StepLayout>(layout);
  launched_ = true;
}

StepResult ModelRunner::finish(const StepPlan& plan) {
  if (plan.empty()) return StepResult{};
  CHECK_MSG(launched_, "[runner] finish() without launch()");
  launched_ = false;
  const StepLayout& layout = *launched_layout_;
  if (plan.num_sampling_rows() == 0) {
    // Only prefill chunks this step. Wait anyway: the next step rewrites the staging buffer.
    backend_.synchronize();
    return StepResult{};
  }
  return read_back(plan, layout);
}

TensorView ModelRunner::staged(size_t offset, int64_t rows, int64_t row_bytes) const {
  return TensorView(static_cast<char*>(staging_.view().data) + offset, {rows, row_bytes}, DType::kU8,
                    staging_.view().device);
}

void ModelRunner::sample_after_forward(const StepPlan& plan, const StepLayout& layout) {
  // Outside the graph: a decode graph is the same whichever rows sample, and these ops need no host
  // planning. Their inputs came over with the step's one host-to-device copy.
  bool any_draw = false, any_penalised_draw = false;
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling || row.sampling->is_greedy()) continue;
    (has_penalties(*row.sampling) ? any_penalised_draw : any_draw) = true;
  }
  const int64_t rows = layout.num_logits_rows, penalised = layout.num_penalised;
  const TensorView logits = logits_.view().slice_rows(0, rows);  // [R, vocab], raw
  const TensorView ids = sampled_ids_.view().slice_rows(0, layout.num_ids());
  if (any_draw)
    backend_.sample(ids.slice_rows(0, rows), logits, staged(layout.sample_params, rows, sizeof(sampling::RowParams)));
  if (penalised > 0) {
    const TensorView penalised_logits = penalised_logits_.view().slice_rows(0, penalised);  // [P, vocab] f32
    const TensorView history(static_cast<char*>(staging_.view().data) + layout.history, {layout.num_history_ids},
                             DType::kI32, staging_.view().device);
    backend_.apply_penalties(penalised_logits, logits,
                             staged(layout.penalty_rows, penalised, sizeof(sampling::PenaltyRow)), history);
    const TensorView penalised_ids = ids.slice_rows(rows, rows + penalised);
    backend_.argmax(penalised_ids, penalised_logits);
    if (any_penalised_draw)
      backend_.sample(penalised_ids, penalised_logits,
                      staged(layout.penalty_params, penalised, sizeof(sampling::RowParams)));
  }
  if (layout.num_logprob_rows > 0) {
    const int64_t n = layout.num_logprob_rows;
    backend_.logprobs(logprob_ids_.view().slice_rows(0, n), logprob_values_.view().slice_rows(0, n), logits, ids,
                      staged(layout.logprob_rows, n, sizeof(sampling::LogprobRow)));
  }
}

StepResult ModelRunner::read_back(const StepPlan& plan, const StepLayout& layout) {
  // Only ids and (id, logprob) pairs cross to the host; the first copy waits for the step's work.
  const int64_t num_ids = layout.num_ids();
  const TensorView ids_host = sampled_ids_host_.view().slice_rows(0, num_ids);
  backend_.copy(ids_host, sampled_ids_.view().slice_rows(0, num_ids));
  const int64_t num_logprob_rows = layout.num_logprob_rows;
  if (num_logprob_rows > 0) {
    backend_.copy(logprob_ids_host_.view().slice_rows(0, num_logprob_rows),
                  logprob_ids_.view().slice_rows(0, num_logprob_rows));
    backend_.copy(logprob_values_host_.view().slice_rows(0, num_logprob_rows),
                  logprob_values_.view().slice_rows(0, num_logprob_rows));
  }
  StepResult result;
  int64_t r = 0, penalised = 0, logprob_row = 0;
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling) continue;
    const SamplingParams& p = *row.sampling;
    const int64_t id_index = has_penalties(p) ? layout.num_logits_rows + penalised++ : r;
    SampledToken sampled{row.request_id, ids_host.ptr<int32_t>()[id_index], std::nullopt};
    if (p.num_logprobs.has_value()) {
      const int32_t* top_ids = logprob_ids_host_.ptr<int32_t>() + logprob_row * kLogprobColumns;
      const float* top_values = logprob_values_host_.ptr<float>() + logprob_row * kLogprobColumns;
      ++logprob_row;
      SampledLogprobs logprobs;
      logprobs.sampled_logprob = top_values[0];  // top_ids[0] is the sampled id
      for (int32_t j = 1; j <= num_top_logprobs(p) && top_ids[j] >= 0; ++j)
        logprobs.top.push_back({top_ids[j], top_values[j]});
      sampled.logprobs = std::move(logprobs);
    }
    result.sampled.push_back(std::move(sampled));
    ++r;
  }
  return result;
}

}  // namespace pagellm
