#include "runner/model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <optional>

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
// Rows sampled from an f32 copy of their logits (Backend::apply_penalties): penalties, logit_bias
// and structured-output masks change the copy, while logprobs keep reading the raw row (as vLLM's
// raw logprobs).
bool uses_penalised_copy(const ScheduledRequest& row) {
  return has_penalties(*row.sampling) || !row.sampling->logit_bias.empty() || row.needs_token_mask;
}

// The top entries a row asks for, as the device returns them (spec/serving.md allows 20; the
// server never asks for more, the CLI's --logprobs is capped here).
int32_t num_top_logprobs(const SamplingParams& p) {
  return std::clamp(p.num_logprobs.value_or(0), 0, sampling::kMaxTopLogprobs);
}

constexpr int64_t kLogprobColumns = 1 + sampling::kMaxTopLogprobs;  // the sampled token, then the top entries

}  // namespace

// Byte offsets of one step's inputs in the staging buffers (a slot's host buffer and the device
// buffer hold the same layout, so one copy moves them all; layout of each part in sched/step.h):
//
//   | token_ids i32 [T] | positions i32 [T] | slot_mapping i64 [G, T] | cu_seqlens_q i32 [B + 1] |
//   | seq_lens_k i32 [B] | logits_rows i32 [R + X] | block_tables i32 [G, B, W] | state_slots i32 [B] |
//   | sample_params [R] sampling::RowParams (24 bytes each) |              (each part 16-byte aligned)
//   | penalty_rows [P] sampling::PenaltyRow (32 B) | penalty_params [P] RowParams |
//   | logprob_rows [L] sampling::LogprobRow (12 B) | history i32 [H] | placeholder pairs i32 [Q, 2] |
//   | GDN checkpoint slots i32 [T] (only in a step that writes prefix-cache checkpoints) |
//   | bias entries i32 [K, 3] (penalised row, token, f32 bits) | mask rows i32 [M] | masks i32 [M, V/32] |
//
// G = KV cache groups (cache/kv_cache_groups.h; 1 unless the model has sliding-window layers).
// X logits rows after the R sampling rows are prompt positions of prompt_logprobs requests (never in
// a decode graph's step): the forward computes them with the rest, their rows are copied back whole
// and their logprobs, top entries and ranks are read on the host (read_back).
// P rows have penalties, a logit_bias or a token mask (history: the prompt + output ids of those with
// penalties back to back, H in all; K bias entries; M masks of V/32 words), L rows want
// logprobs, Q placeholders (a decode's input token, or the last history id of a penalised row) are
// filled on the device by Backend::copy_ids: pair (i32 index into this buffer, index into the
// previous step's sampled ids). The offsets of the first nine parts depend only on (G, T, B, R, W): a
// graph captured for a decode bucket (T = B = R) finds its inputs at the same device addresses on
// every replay; the rest are read only by ops that run before or after it. The mask rows and masks
// come last: launch_forward() copies everything before them, launch_sampling() them (the host
// fills the masks while the forward runs).
//
// Sampled ids on the device, [R + P] i32: ids[r] for sampling row r (argmax, or Backend::sample's
// draw), ids[R + p] for penalised row p (the argmax or draw over its penalised copy).
struct ModelRunner::StepLayout {
  int64_t num_groups, num_tokens, num_seqs, num_logits_rows, table_width, num_penalised, num_logprob_rows, num_history_ids,
      num_placeholders, num_prompt_rows, num_bias_entries = 0, num_masks = 0, mask_words = 0, num_checkpoint_targets = 0;
  // A graph bucket's padding rows (past the plan's) have the shape of its rows: tokens each, and
  // sampled positions each (the last ones).
  int64_t padding_row_tokens = 1, padding_row_samples = 1;
  bool has_draft_rows = false;  // StepBatch::has_draft_rows
  size_t checkpoint_slots = 0;
  size_t token_ids, positions, slot_mapping, cu_seqlens_q, seq_lens_k, logits_rows, block_tables, state_slots,
      sample_params, penalty_rows, penalty_params, logprob_rows, history, placeholders, bias_entries = 0, mask_rows = 0,
      masks = 0, total_bytes;

  StepLayout(int64_t g, int64_t t, int64_t b, int64_t r, int64_t w, int64_t p = 0, int64_t l = 0, int64_t h = 0,
             int64_t q = 0, int64_t x = 0)
      : num_groups(g), num_tokens(t), num_seqs(b), num_logits_rows(r), table_width(w), num_penalised(p), num_logprob_rows(l),
        num_history_ids(h), num_placeholders(q), num_prompt_rows(x) {
    size_t at = 0;
    auto take = [&](int64_t bytes) {
      const size_t offset = at;
      at = align16(at + static_cast<size_t>(bytes));
      return offset;
    };
    token_ids = take(4 * t);
    positions = take(4 * t);
    slot_mapping = take(8 * g * t);
    cu_seqlens_q = take(4 * (b + 1));
    seq_lens_k = take(4 * b);
    logits_rows = take(4 * (r + x));
    block_tables = take(4 * g * b * w);
    state_slots = take(4 * b);
    sample_params = take(static_cast<int64_t>(sizeof(sampling::RowParams)) * r);
    penalty_rows = take(static_cast<int64_t>(sizeof(sampling::PenaltyRow)) * p);
    penalty_params = take(static_cast<int64_t>(sizeof(sampling::RowParams)) * p);
    logprob_rows = take(static_cast<int64_t>(sizeof(sampling::LogprobRow)) * l);
    history = take(4 * h);
    placeholders = take(8 * q);
    total_bytes = at;
  }
  // Hybrid models' checkpoint slots per token, after every part a graph names (call before add_constraints).
  void add_gdn_checkpoints() {
    num_checkpoint_targets = num_tokens;
    checkpoint_slots = total_bytes;
    total_bytes = align16(checkpoint_slots + static_cast<size_t>(4 * num_tokens));
  }
  // The logit constraints' parts, after every part a graph names.
  void add_constraints(int64_t k, int64_t m, int64_t words) {
    num_bias_entries = k;
    num_masks = m;
    mask_words = words;
    bias_entries = total_bytes;
    mask_rows = align16(bias_entries + static_cast<size_t>(12 * k));
    masks = align16(mask_rows + static_cast<size_t>(4 * m));
    total_bytes = align16(masks + static_cast<size_t>(4 * m * words));
  }
  int64_t num_ids() const { return num_logits_rows + num_penalised; }
  // Bytes launch_forward() copies: all but the mask rows and masks.
  size_t forward_bytes() const { return num_masks > 0 ? mask_rows : total_bytes; }
  int64_t num_forward_rows() const { return num_logits_rows + num_prompt_rows; }  // logits the forward computes
};

// The host side of one launched step: its inputs as packed, and where its outputs land.
struct ModelRunner::StepSlot {
  Tensor staging_host;  // [bytes] u8, page-locked on a GPU
  Tensor ids_host;      // [ids] i32: the step's sampled ids, copied back
  Tensor logprob_ids_host, logprob_values_host;  // [logprob rows, 1 + kMaxTopLogprobs] i32 / f32
  Tensor prompt_logits_host;  // [X, vocab] activation dtype: the prompt_logprobs rows, copied back
  std::optional<StepLayout> layout;
  uint64_t step_index = 0;
  uint64_t done_mark = 0;  // Backend::mark() after the step's last queued op
  bool is_sampling_launched = false;  // launch_sampling() has queued the step's second half
  // Where the id each sampling request gets in this step lands in sampled_ids_: the next step's
  // placeholders read it there.
  std::unordered_map<RequestId, int32_t> id_index;
};

ModelRunner::ModelRunner(Model& model, Backend& backend, int num_blocks, int block_size, int num_state_slots,
                         std::optional<DType> kv_dtype, int num_state_checkpoints, int num_state_drafts)
    : model_(model), backend_(backend), block_size_(block_size),
      next_seed_state_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
      graphs_enabled_(backend.device() != Device::kCpu && model.is_graph_capturable() && backend.kernel_options().graphs) {
  MemorySpec spec = model.memory_spec();
  if (kv_dtype) spec.kv_dtype = *kv_dtype;
  kv_groups_ = kv_cache_groups_of(spec);
  // Tensor slot j holds layer j of every group (cache/kv_cache_groups.h).
  std::vector<KvCacheView> slots;
  for (int64_t j = 0; j < kv_groups_.layers_per_group; ++j) {
    Tensor k = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    Tensor v = backend.alloc({num_blocks, block_size, spec.num_kv_heads, spec.head_dim}, spec.kv_dtype);
    slots.push_back({k.view(), v.view()});
    cache_tensors_.push_back(std::move(k));
    cache_tensors_.push_back(std::move(v));
  }
  for (const KvLayerPlace& place : kv_groups_.layers) {
    KvCacheView view = slots[static_cast<size_t>(place.slot)];
    view.group = place.group;
    caches_.attention_layers.push_back(view);
  }
  if (spec.is_hybrid()) {
    state_slots_ = std::make_unique<StateSlotBinder>(spec, backend, num_state_slots, num_state_checkpoints,
                                                      num_state_drafts);
    caches_.gdn_layers = state_slots_->cache().views();
  }
  for (auto& slot : slots_) slot = std::make_unique<StepSlot>();
}

ModelRunner::~ModelRunner() {
  graphs_.clear();  // before the buffers they point at
}

void ModelRunner::reserve(const StepLayout& layout, StepSlot& slot) {
  // Device buffers are freed in stream order (a step still running keeps reading the old ones); a
  // slot's host buffers belong to a finished step. Graphs name the device buffers: growing one
  // drops them.
  bool grew = false;
  const int64_t bytes = static_cast<int64_t>(layout.total_bytes);
  const int64_t capacity_bytes = std::max<int64_t>(2 * bytes, int64_t{1} << 16);
  if (!slot.staging_host.defined() || slot.staging_host.numel() < bytes) {
    slot.staging_host = backend_.alloc_host({capacity_bytes}, DType::kU8);
  }
  if (backend_.device() != Device::kCpu && (!staging_.defined() || staging_.numel() < bytes)) {
    staging_ = backend_.alloc({capacity_bytes}, DType::kU8);
    grew = true;
  }
  const int64_t rows = std::max<int64_t>(layout.num_forward_rows(), 1);
  if (!logits_.defined() || logits_.size(0) < rows) {
    const int64_t capacity = std::max<int64_t>({rows, logits_.defined() ? 2 * logits_.size(0) : 0, 16});
    logits_ = backend_.alloc({capacity, model_.config().vocab_size}, model_.activation_dtype());
    Tensor ids = backend_.alloc({2 * capacity}, DType::kI32);  // R + P <= 2R
    // The ids of a step still running: the next step's placeholders read them here.
    if (sampled_ids_.defined()) backend_.copy(ids.view().slice_rows(0, sampled_ids_.numel()), sampled_ids_.view());
    sampled_ids_ = std::move(ids);
    grew = true;
  }
  if (!slot.ids_host.defined() || slot.ids_host.numel() < layout.num_ids())
    slot.ids_host = backend_.alloc_host({std::max<int64_t>(2 * layout.num_ids(), 64)}, DType::kI32);
  if (grew) graphs_.clear();  // they point at the old buffers
  // Read only by the sampling ops after a graph's replay: growing them keeps the graphs.
  if (layout.num_penalised > 0 && (!penalised_logits_.defined() || penalised_logits_.size(0) < layout.num_penalised)) {
    const int64_t capacity = std::max<int64_t>(
        {layout.num_penalised, penalised_logits_.defined() ? 2 * penalised_logits_.size(0) : 0, 4});
    penalised_logits_ = backend_.alloc({capacity, model_.config().vocab_size}, DType::kF32);
  }
  const int64_t logprob_rows = layout.num_logprob_rows;
  if (logprob_rows > 0 && (!logprob_ids_.defined() || logprob_ids_.size(0) < logprob_rows)) {
    const int64_t capacity = std::max<int64_t>({logprob_rows, logprob_ids_.defined() ? 2 * logprob_ids_.size(0) : 0, 16});
    logprob_ids_ = backend_.alloc({capacity, kLogprobColumns}, DType::kI32);
    logprob_values_ = backend_.alloc({capacity, kLogprobColumns}, DType::kF32);
  }
  const int64_t prompt_rows = layout.num_prompt_rows;
  if (prompt_rows > 0 && (!slot.prompt_logits_host.defined() || slot.prompt_logits_host.size(0) < prompt_rows))
    slot.prompt_logits_host = backend_.alloc_host({prompt_rows, model_.config().vocab_size}, model_.activation_dtype());
  if (logprob_rows > 0 && (!slot.logprob_ids_host.defined() || slot.logprob_ids_host.size(0) < logprob_rows)) {
    const int64_t capacity = std::max<int64_t>(2 * logprob_rows, 16);
    slot.logprob_ids_host = backend_.alloc_host({capacity, kLogprobColumns}, DType::kI32);
    slot.logprob_values_host = backend_.alloc_host({capacity, kLogprobColumns}, DType::kF32);
  }
}

int64_t ModelRunner::count_placeholders(const StepPlan& plan) {
  int64_t count = 0;
  for (const ScheduledRequest& row : plan.rows) {
    for (TokenId id : row.token_ids) count += id == kPlaceholderToken ? 1 : 0;
    for (TokenId id : row.history_token_ids) count += id == kPlaceholderToken ? 1 : 0;
  }
  return count;
}

void ModelRunner::pack(const StepPlan& plan, const StepLayout& layout, StepSlot& slot, const StepSlot* previous) {
  char* base = slot.staging_host.ptr<char>();
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
  int32_t* placeholders = reinterpret_cast<int32_t*>(base + layout.placeholders);
  int32_t* bias_entries = reinterpret_cast<int32_t*>(base + layout.bias_entries);
  int32_t* mask_rows = reinterpret_cast<int32_t*>(base + layout.mask_rows);
  int64_t num_bias_entries = 0, num_masks = 0;
  const int64_t width = layout.table_width;
  int32_t token = 0, sampling_row = 0, penalised_row = 0, logprob_row = 0, history_ids = 0, num_placeholders = 0;
  int32_t* prompt_logits_rows = logits_rows + layout.num_logits_rows;  // [X] after the R sampling rows
  int64_t prompt_row = 0;
  // A placeholder at i32 index `at` of the staging buffer takes the previous step's id of `id`.
  auto placeholder = [&](size_t at, RequestId id) {
    CHECK_MSG(previous != nullptr, "[runner] request {} has a placeholder token but no step is running", id);
    const auto it = previous->id_index.find(id);
    CHECK_MSG(it != previous->id_index.end(), "[runner] request {}: the running step samples nothing for it", id);
    placeholders[2 * num_placeholders] = static_cast<int32_t>(at / 4);
    placeholders[2 * num_placeholders + 1] = it->second;
    ++num_placeholders;
    return TokenId{0};  // until copy_ids writes the id on the device
  };
  slot.id_index.clear();
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  const int64_t num_groups = layout.num_groups, group_table_ints = layout.num_seqs * width;
  for (int64_t b = 0; b < num_rows; ++b) {
    const ScheduledRequest& row = plan.rows[static_cast<size_t>(b)];
    cu_seqlens_q[b] = token;
    seq_lens_k[b] = row.context_len();
    CHECK_MSG(static_cast<int64_t>(row.block_tables.size()) == num_groups,
              "[runner] request {} has {} block tables for {} KV cache groups", row.request_id,
              row.block_tables.size(), num_groups);
    for (int64_t g = 0; g < num_groups; ++g) {
      const std::vector<BlockId>& group_table = row.block_tables[static_cast<size_t>(g)];
      int32_t* table = block_tables + g * group_table_ints + b * width;
      CHECK(static_cast<int64_t>(group_table.size()) <= width);
      std::copy(group_table.begin(), group_table.end(), table);
      std::fill(table + group_table.size(), table + width, kNoBlock);
      for (int i = 0; i < row.num_new_tokens(); ++i)
        slot_mapping[g * layout.num_tokens + token + i] = slot_of_position(group_table, row.start_pos + i, block_size_);
    }
    for (int i = 0; i < row.num_new_tokens(); ++i, ++token) {
      const int pos = row.start_pos + i;
      const TokenId id = row.token_ids[static_cast<size_t>(i)];
      token_ids[token] = id == kPlaceholderToken ? placeholder(layout.token_ids + 4 * static_cast<size_t>(token), row.request_id) : id;
      positions[token] = pos;
    }
    // prompt_logprobs: the row's first prompt_logprob_targets.size() tokens predict the next prompt token.
    const int32_t row_first_token = token - static_cast<int32_t>(row.num_new_tokens());
    for (size_t i = 0; i < row.prompt_logprob_targets.size(); ++i)
      prompt_logits_rows[prompt_row++] = row_first_token + static_cast<int32_t>(i);
    if (!row.is_sampling) continue;
    const SamplingParams& p = *row.sampling;
    // Position i of a speculative row: the logits after its i-th draft, sampled as output
    // num_output_tokens + i with the drafts before it in its penalty history.
    for (int i = 0; i <= row.num_draft_tokens; ++i) {
      int32_t id_index = sampling_row;
      if (uses_penalised_copy(row)) {
        // Its draw runs on the penalised copy; the raw row keeps its argmax (unused) and is not drawn.
        sample_params[sampling_row] = sampling::RowParams{};
        penalty_params[penalised_row] = device_sample_params(row, i);
        sampling::PenaltyRow& penalty = penalty_rows[penalised_row];
        penalty = sampling::PenaltyRow{};
        penalty.logits_row = sampling_row;
        penalty.history_offset = history_ids;
        // sample_token's split: the first num_prompt_tokens ids are the prompt, the rest outputs.
        const int32_t num_history = static_cast<int32_t>(row.history_token_ids.size()) + i;
        penalty.num_prompt_tokens = std::min(row.num_prompt_tokens, num_history);
        penalty.num_output_tokens = num_history - penalty.num_prompt_tokens;
        penalty.repetition_penalty = p.repetition_penalty;
        penalty.presence_penalty = p.presence_penalty;
        penalty.frequency_penalty = p.frequency_penalty;
        for (const TokenId id : row.history_token_ids) {
          history[history_ids] =
              id == kPlaceholderToken ? placeholder(layout.history + 4 * static_cast<size_t>(history_ids), row.request_id) : id;
          ++history_ids;
        }
        const TokenId* drafts = row.token_ids.data() + row.num_new_tokens() - row.num_draft_tokens;
        for (int d = 0; d < i; ++d) history[history_ids++] = drafts[d];
        for (const auto& [token_id, bias] : p.logit_bias) {
          int32_t* entry = bias_entries + 3 * num_bias_entries++;
          entry[0] = penalised_row;
          entry[1] = token_id;
          std::memcpy(&entry[2], &bias, sizeof(bias));
        }
        if (row.needs_token_mask) mask_rows[num_masks++] = penalised_row;  // its mask: pack_masks()
        id_index = static_cast<int32_t>(layout.num_logits_rows) + penalised_row++;
      } else {
        sample_params[sampling_row] = device_sample_params(row, i);
      }
      if (p.num_logprobs.has_value()) logprob_rows[logprob_row++] = {sampling_row, id_index, num_top_logprobs(p)};
      slot.id_index[row.request_id] = id_index;  // the last position's: a planned-ahead step reads it
      logits_rows[sampling_row++] = token - 1 - row.num_draft_tokens + i;
    }
  }
  // Padding rows of a graph bucket: context 0, so their tokens see no key and write no slot.
  for (int64_t b = num_rows; b < layout.num_seqs; ++b) {
    cu_seqlens_q[b] = token;
    seq_lens_k[b] = 0;
    for (int64_t g = 0; g < num_groups; ++g) {
      int32_t* table = block_tables + g * group_table_ints + b * width;
      std::fill(table, table + width, kNoBlock);
    }
    for (int64_t i = 0; i < layout.padding_row_tokens; ++i, ++token) {
      for (int64_t g = 0; g < num_groups; ++g) slot_mapping[g * layout.num_tokens + token] = -1;
      token_ids[token] = 0;
      positions[token] = 0;
    }
    for (int64_t i = layout.padding_row_samples; i > 0; --i) {
      sample_params[sampling_row] = sampling::RowParams{};  // temperature 0: Backend::sample skips it
      logits_rows[sampling_row++] = token - static_cast<int32_t>(i);
    }
  }
  cu_seqlens_q[layout.num_seqs] = token;
  if (state_slots_) state_slots_->write(reinterpret_cast<int32_t*>(base + layout.state_slots), layout.num_seqs);
  if (layout.num_checkpoint_targets > 0)
    state_slots_->write_checkpoints(plan, reinterpret_cast<int32_t*>(base + layout.checkpoint_slots),
                                    layout.num_checkpoint_targets);
  CHECK(token == layout.num_tokens && sampling_row == layout.num_logits_rows && prompt_row == layout.num_prompt_rows);
  CHECK(penalised_row == layout.num_penalised && logprob_row == layout.num_logprob_rows &&
        history_ids == layout.num_history_ids && num_placeholders == layout.num_placeholders &&
        num_bias_entries == layout.num_bias_entries && num_masks == layout.num_masks);
}

TensorView ModelRunner::device_staging(const StepSlot& slot) const {
  return backend_.device() == Device::kCpu ? slot.staging_host.view() : staging_.view();
}

void ModelRunner::pack_masks(const StepPlan& plan, const StepLayout& layout, StepSlot& slot) const {
  uint32_t* masks = reinterpret_cast<uint32_t*>(slot.staging_host.ptr<char>() + layout.masks);
  const size_t words = static_cast<size_t>(layout.mask_words);
  int64_t num_masks = 0;
  for (const ScheduledRequest& row : plan.rows) {
    CHECK_MSG(!row.token_mask || row.needs_token_mask, "[runner] request {} has a token mask but its row was not marked",
              row.request_id);
    if (!row.is_sampling || !row.needs_token_mask) continue;  // pack()'s order of mask rows
    uint32_t* mask = masks + static_cast<size_t>(num_masks++) * words;
    if (!row.token_mask) {
      std::fill(mask, mask + words, ~uint32_t{0});
      continue;
    }
    CHECK_MSG(row.token_mask->size() >= words, "[runner] request {}: a token mask of {} words, the vocabulary needs {}",
              row.request_id, row.token_mask->size(), words);
    std::copy_n(row.token_mask->data(), words, mask);
  }
  CHECK(num_masks == layout.num_masks);
}

void ModelRunner::upload(const StepLayout& layout, const StepSlot& slot) {
  const int64_t bytes = static_cast<int64_t>(layout.forward_bytes());
  if (backend_.device() != Device::kCpu)
    backend_.copy(staging_.view().slice_rows(0, bytes), slot.staging_host.view().slice_rows(0, bytes));
  if (layout.num_placeholders == 0) return;
  backend_.copy_ids(staged(slot, 0, {bytes / 4}, DType::kI32),  // the layout up to the masks as i32
                    sampled_ids_.view(), staged(slot, layout.placeholders, {layout.num_placeholders, 2}, DType::kI32));
}

void ModelRunner::upload_masks(const StepLayout& layout, const StepSlot& slot) {
  if (backend_.device() == Device::kCpu) return;  // the CPU reads the host staging itself
  const int64_t begin = static_cast<int64_t>(layout.forward_bytes()), end = static_cast<int64_t>(layout.total_bytes);
  backend_.copy(staging_.view().slice_rows(begin, end), slot.staging_host.view().slice_rows(begin, end));
}

StepBatch ModelRunner::device_batch(const StepLayout& layout, const StepSlot& slot, int32_t max_seqlen_q,
                                     int32_t max_seqlen_k) const {
  auto view = [&](size_t offset, Shape shape, DType dtype) { return staged(slot, offset, shape, dtype); };
  StepBatch batch;
  batch.num_tokens = layout.num_tokens;
  batch.num_seqs = layout.num_seqs;
  batch.max_seqlen_q = max_seqlen_q;
  batch.max_seqlen_k = max_seqlen_k;
  batch.has_draft_rows = layout.has_draft_rows;
  batch.token_ids = view(layout.token_ids, {layout.num_tokens}, DType::kI32);
  batch.positions = view(layout.positions, {layout.num_tokens}, DType::kI32);
  batch.slot_mapping = view(layout.slot_mapping, {layout.num_tokens}, DType::kI64);
  batch.cu_seqlens_q = view(layout.cu_seqlens_q, {layout.num_seqs + 1}, DType::kI32);
  batch.seq_lens_k = view(layout.seq_lens_k, {layout.num_seqs}, DType::kI32);
  batch.logits_rows = view(layout.logits_rows, {layout.num_forward_rows()}, DType::kI32);
  batch.block_tables = view(layout.block_tables, {layout.num_seqs, layout.table_width}, DType::kI32);
  for (int64_t g = 1; g < layout.num_groups; ++g) {
    batch.more_slot_mappings.push_back(
        view(layout.slot_mapping + static_cast<size_t>(8 * g * layout.num_tokens), {layout.num_tokens}, DType::kI64));
    batch.more_block_tables.push_back(
        view(layout.block_tables + static_cast<size_t>(4 * g * layout.num_seqs * layout.table_width),
             {layout.num_seqs, layout.table_width}, DType::kI32));
  }
  if (state_slots_) {
    batch.state_slots = view(layout.state_slots, {layout.num_seqs}, DType::kI32);
    batch.state_slot_inits = state_slots_->inits();
  }
  if (layout.num_checkpoint_targets > 0)
    batch.gdn_checkpoint_slots = view(layout.checkpoint_slots, {layout.num_checkpoint_targets}, DType::kI32);
  return batch;
}

void ModelRunner::forward_and_argmax(const StepBatch& batch, int64_t num_sampling_rows) {
  const TensorView logits = logits_.view().slice_rows(0, batch.logits_rows.numel());  // [R + X, vocab]
  model_.forward(batch, caches_, logits);
  if (num_sampling_rows > 0)
    backend_.argmax(sampled_ids_.view().slice_rows(0, num_sampling_rows), logits.slice_rows(0, num_sampling_rows));
}

sampling::RowParams ModelRunner::device_sample_params(const ScheduledRequest& row, int position) {
  sampling::RowParams params;  // temperature 0: the row keeps its argmax
  const SamplingParams& p = *row.sampling;
  if (p.is_greedy()) return params;
  params.temperature = p.temperature;
  params.top_k = p.top_k;
  params.top_p = p.top_p;
  params.min_p = p.min_p;
  // Output j draws uniform j of its seed, whether it is sampled alone or at a speculative position.
  params.uniform = counter_uniform(seed_for(row), static_cast<uint64_t>(row.num_output_tokens + position));
  return params;
}

uint64_t ModelRunner::seed_for(const ScheduledRequest& row) {
  if (row.sampling->seed) return *row.sampling->seed;
  auto [it, inserted] = drawn_seeds_.try_emplace(row.request_id, 0);
  if (inserted) it->second = (next_seed_state_ += 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  return it->second;
}

// The plan's layout, and the attention bounds its forward is planned with.
struct ModelRunner::ForwardShape {
  StepLayout layout;
  int32_t max_seqlen_q = 0, max_seqlen_k = 0;
  bool replays_graph = false;  // a step of uniform rows in a graph bucket
};

namespace {

// Steps whose rows all have one shape replay a graph: decodes (1 token, 1 sampled), and on models
// without recurrent state, speculative rows (1 + k tokens, all sampled) or a draft model's catch-up
// rows (q tokens, the last sampled) of one q. Rows with prompt_logprobs or GDN checkpoints do not.
struct UniformRows {
  int64_t tokens = 0, samples = 0;
};
std::optional<UniformRows> uniform_rows(const StepPlan& plan, bool multi_token_allowed) {
  if (plan.rows.empty()) return std::nullopt;
  const ScheduledRequest& first = plan.rows.front();
  const UniformRows shape{first.num_new_tokens(), first.num_sampled_tokens()};
  if (shape.tokens > 1 && (!multi_token_allowed || (shape.samples != 1 && shape.samples != shape.tokens)))
    return std::nullopt;
  for (const ScheduledRequest& row : plan.rows)
    if (!row.is_sampling || row.num_new_tokens() != shape.tokens || row.num_sampled_tokens() != shape.samples ||
        !row.prompt_logprob_targets.empty() || !row.state_checkpoints.empty())
      return std::nullopt;
  return shape;
}

}  // namespace

ModelRunner::ForwardShape ModelRunner::forward_shape(const StepPlan& plan) const {
  const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
  const int64_t num_sampling = plan.num_sampled_tokens();
  int64_t max_blocks = 1, num_penalised = 0, num_logprob_rows = 0, num_history_ids = 0, num_bias_entries = 0, num_masks = 0,
          num_prompt_rows = 0;
  int32_t max_seqlen_q = 0, max_seqlen_k = 0;
  for (const ScheduledRequest& row : plan.rows) {
    for (const std::vector<BlockId>& table : row.block_tables)
      max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(table.size()));
    max_seqlen_q = std::max(max_seqlen_q, static_cast<int32_t>(row.num_new_tokens()));
    max_seqlen_k = std::max(max_seqlen_k, static_cast<int32_t>(row.context_len()));
    num_prompt_rows += static_cast<int64_t>(row.prompt_logprob_targets.size());
    if (!row.is_sampling) continue;
    CHECK_MSG(row.num_draft_tokens == 0 || !row.needs_token_mask, "[runner] request {}: drafts under a token mask",
              row.request_id);
    // A speculative row samples 1 + k positions, position i after i of its drafts.
    const int64_t positions = row.num_sampled_tokens(), k = row.num_draft_tokens;
    if (uses_penalised_copy(row)) {
      num_penalised += positions;
      num_history_ids += positions * static_cast<int64_t>(row.history_token_ids.size()) + k * (k + 1) / 2;
      num_bias_entries += positions * static_cast<int64_t>(row.sampling->logit_bias.size());
      num_masks += row.needs_token_mask ? 1 : 0;
    }
    if (row.sampling->num_logprobs.has_value()) num_logprob_rows += positions;
  }
  const int64_t num_placeholders = count_placeholders(plan);
  const std::optional<UniformRows> uniform = graphs_enabled_ ? uniform_rows(plan, state_slots_ == nullptr) : std::nullopt;
  const int64_t bucket = uniform ? graph_bucket(num_rows) : 0;
  const int64_t g = kv_groups_.num_groups();
  StepLayout layout =
      bucket > 0 ? StepLayout(g, bucket * uniform->tokens, bucket, bucket * uniform->samples, graph_table_width(max_blocks),
                              num_penalised, num_logprob_rows, num_history_ids, num_placeholders)
                 : StepLayout(g, plan.num_scheduled_tokens(), num_rows, num_sampling, max_blocks, num_penalised,
                              num_logprob_rows, num_history_ids, num_placeholders, num_prompt_rows);
  layout.has_draft_rows = std::any_of(plan.rows.begin(), plan.rows.end(),
                                      [](const ScheduledRequest& row) { return row.num_draft_tokens > 0; });
  if (bucket > 0) {
    layout.padding_row_tokens = uniform->tokens;
    layout.padding_row_samples = uniform->samples;
  }
  CHECK_MSG(bucket == 0 || num_prompt_rows == 0, "[runner] a graph step with prompt_logprobs rows");
  const bool writes_checkpoints = state_slots_ && StateSlotBinder::writes_checkpoints(plan);
  CHECK_MSG(bucket == 0 || !writes_checkpoints, "[runner] a graph step writes GDN checkpoints");
  if (writes_checkpoints) layout.add_gdn_checkpoints();
  if (num_bias_entries + num_masks > 0)
    layout.add_constraints(num_bias_entries, num_masks, (model_.config().vocab_size + 31) / 32);
  return ForwardShape{layout, bucket > 0 ? static_cast<int32_t>(uniform->tokens) : max_seqlen_q, max_seqlen_k, bucket > 0};
}

void ModelRunner::launch_forward(const StepPlan& plan) {
  for (RequestId id : plan.finished_request_ids) drawn_seeds_.erase(id);
  if (state_slots_) state_slots_->bind(plan);
  if (plan.empty()) return;
  CHECK_MSG(num_launched_ < 2, "[runner] launch_forward() of a third step before finish() of the first");
  const StepSlot* previous = num_launched_ > 0 ? &newest_launched() : nullptr;
  // This step's placeholders read the previous step's sampled ids, so its sampling is queued first.
  CHECK_MSG(!previous || previous->is_sampling_launched, "[runner] launch_forward() of step {} before launch_sampling() of step {}",
            plan.step_index, previous ? previous->step_index : 0);
  StepSlot& slot = *slots_[(oldest_launched_ + num_launched_) % 2];
  const ForwardShape shape = forward_shape(plan);
  const StepLayout& layout = shape.layout;
  reserve(layout, slot);
  pack(plan, layout, slot, previous);
  upload(layout, slot);
  if (shape.replays_graph) {
    run_graph(layout, slot, shape.max_seqlen_q);
  } else {
    forward_and_argmax(device_batch(layout, slot, shape.max_seqlen_q, shape.max_seqlen_k), plan.num_sampled_tokens());
  }
  slot.layout = layout;
  slot.step_index = plan.step_index;
  slot.is_sampling_launched = false;
  ++num_launched_;
}

void ModelRunner::launch_sampling(const StepPlan& plan) {
  if (plan.empty()) return;
  CHECK_MSG(num_launched_ > 0, "[runner] launch_sampling() without launch_forward()");
  StepSlot& slot = newest_launched();
  CHECK_MSG(slot.step_index == plan.step_index && !slot.is_sampling_launched,
            "[runner] launch_sampling() of step {}, but the step awaiting its sampling is {}", plan.step_index,
            slot.is_sampling_launched ? int64_t{-1} : static_cast<int64_t>(slot.step_index));
  const StepLayout& layout = *slot.layout;
  if (layout.num_masks > 0) {
    pack_masks(plan, layout, slot);
    upload_masks(layout, slot);
  }
  if (plan.num_sampling_rows() > 0) sample_after_forward(plan, layout, slot);
  queue_read_back(layout, slot);
  slot.is_sampling_launched = true;
}

void ModelRunner::run_graph(const StepLayout& layout, const StepSlot& slot, int32_t tokens_per_row) {
  // A graph's launch plan must not depend on this step's contexts: the attention is planned for
  // the longest context the table width allows (max_seqlen_k), and reads the real ones on the device.
  const StepBatch batch =
      device_batch(layout, slot, tokens_per_row, static_cast<int32_t>(layout.table_width * block_size_));
  std::unique_ptr<OpGraph>& graph =
      graphs_[GraphKey{layout.num_seqs, tokens_per_row, layout.padding_row_samples, layout.table_width}];
  if (tokens_per_row > 1) ++num_multi_token_graph_steps_;
  if (graph) {
    graph->replay();
  } else {
    forward_and_argmax(batch, layout.num_logits_rows);  // also sizes every scratch buffer the capture will name
    graph = model_.capture(backend_, [&] { forward_and_argmax(batch, layout.num_logits_rows); });
  }
}

int ModelRunner::capture_decode_graphs(int max_num_seqs, int max_num_batched_tokens, int max_model_len) {
  if (!graphs_enabled_) return 0;
  CHECK_MSG(num_launched_ == 0, "[runner] capture_decode_graphs() with a step launched");
  const int64_t largest_bucket = kGraphBuckets[std::size(kGraphBuckets) - 1];
  const int64_t top_bucket = graph_bucket(max_num_seqs) > 0 ? graph_bucket(max_num_seqs) : largest_bucket;
  const int64_t top_width = graph_table_width((max_model_len + block_size_ - 1) / block_size_);
  if (state_slots_) state_slots_->bind(StepPlan{});  // every row is padding (the scratch state slot)
  StepSlot& slot = *slots_[oldest_launched_];
  const int64_t prefill_rows = std::min<int64_t>(max_num_seqs, max_num_batched_tokens);
  reserve(StepLayout(kv_groups_.num_groups(), max_num_batched_tokens, prefill_rows, prefill_rows, top_width), slot);
  int captured = 0;
  // Largest first: the first capture sizes the staging, logits and scratch buffers for all others.
  for (auto bucket = std::rbegin(kGraphBuckets); bucket != std::rend(kGraphBuckets); ++bucket) {
    if (*bucket > top_bucket) continue;
    for (int64_t width = top_width; width >= graph_table_width(1); width /= 2) {
      if (graphs_.contains(GraphKey{*bucket, 1, 1, width})) continue;
      const StepLayout layout(kv_groups_.num_groups(), *bucket, *bucket, *bucket, width);
      reserve(layout, slot);
      pack(StepPlan{}, layout, slot, nullptr);
      upload(layout, slot);
      run_graph(layout, slot, 1);
      backend_.synchronize();  // the next pack rewrites the host staging this step's copy reads
      ++captured;
    }
  }
  return captured;
}

StepResult ModelRunner::finish(const StepPlan& plan) {
  if (plan.empty()) return StepResult{};
  CHECK_MSG(num_launched_ > 0, "[runner] finish() without launch()");
  StepSlot& slot = *slots_[oldest_launched_];
  CHECK_MSG(slot.step_index == plan.step_index, "[runner] finish() of step {} but step {} was launched first",
            plan.step_index, slot.step_index);
  CHECK_MSG(slot.is_sampling_launched, "[runner] finish() of step {} before launch_sampling()", plan.step_index);
  oldest_launched_ = (oldest_launched_ + 1) % 2;
  --num_launched_;
  backend_.wait_for(slot.done_mark);  // also frees the slot's staging for the next launch
  if (plan.num_sampled_tokens() == 0 && slot.layout->num_prompt_rows == 0) return StepResult{};
  StepResult result = read_back(plan, slot);
  if (slot.layout->num_prompt_rows > 0) result.prompt_logprobs = read_prompt_logprobs(plan, slot);
  return result;
}

TensorView ModelRunner::staged(const StepSlot& slot, size_t offset, Shape shape, DType dtype) const {
  const TensorView staging = device_staging(slot);
  return TensorView(static_cast<char*>(staging.data) + offset, shape, dtype, staging.device);
}

TensorView ModelRunner::staged_rows(const StepSlot& slot, size_t offset, int64_t rows, size_t row_bytes) const {
  return staged(slot, offset, {rows, static_cast<int64_t>(row_bytes)}, DType::kU8);
}

void ModelRunner::sample_after_forward(const StepPlan& plan, const StepLayout& layout, const StepSlot& slot) {
  // Outside the graph: a decode graph is the same whichever rows sample, and these ops need no host
  // planning. Their inputs came over with the step's one host-to-device copy.
  bool any_draw = false, any_penalised_draw = false;
  for (const ScheduledRequest& row : plan.rows) {
    if (!row.is_sampling || row.sampling->is_greedy()) continue;
    (uses_penalised_copy(row) ? any_penalised_draw : any_draw) = true;
  }
  const int64_t rows = layout.num_logits_rows, penalised = layout.num_penalised;
  const TensorView logits = logits_.view().slice_rows(0, rows);  // [R, vocab], raw
  const TensorView ids = sampled_ids_.view().slice_rows(0, layout.num_ids());
  if (any_draw)
    backend_.sample(ids.slice_rows(0, rows), logits, staged_rows(slot, layout.sample_params, rows, sizeof(sampling::RowParams)));
  if (penalised > 0) {
    const TensorView penalised_logits = penalised_logits_.view().slice_rows(0, penalised);  // [P, vocab] f32
    const TensorView history = staged(slot, layout.history, {layout.num_history_ids}, DType::kI32);
    backend_.apply_penalties(penalised_logits, logits,
                             staged_rows(slot, layout.penalty_rows, penalised, sizeof(sampling::PenaltyRow)), history);
    if (layout.num_bias_entries > 0)
      backend_.add_logit_bias(penalised_logits, staged(slot, layout.bias_entries, {layout.num_bias_entries, 3}, DType::kI32));
    if (layout.num_masks > 0)
      backend_.apply_token_bitmask(penalised_logits,
                                   staged(slot, layout.masks, {layout.num_masks, layout.mask_words}, DType::kI32),
                                   staged(slot, layout.mask_rows, {layout.num_masks}, DType::kI32));
    const TensorView penalised_ids = ids.slice_rows(rows, rows + penalised);
    backend_.argmax(penalised_ids, penalised_logits);
    if (any_penalised_draw)
      backend_.sample(penalised_ids, penalised_logits,
                      staged_rows(slot, layout.penalty_params, penalised, sizeof(sampling::RowParams)));
  }
  if (layout.num_logprob_rows > 0) {
    const int64_t n = layout.num_logprob_rows;
    backend_.logprobs(logprob_ids_.view().slice_rows(0, n), logprob_values_.view().slice_rows(0, n), logits, ids,
                      staged_rows(slot, layout.logprob_rows, n, sizeof(sampling::LogprobRow)));
  }
}

void ModelRunner::queue_read_back(const StepLayout& layout, StepSlot& slot) {
  // Only ids and (id, logprob) pairs cross to the host, without waiting: finish() waits for the mark.
  const int64_t num_ids = layout.num_ids();
  if (num_ids > 0)
    backend_.copy_to_host_async(slot.ids_host.view().slice_rows(0, num_ids), sampled_ids_.view().slice_rows(0, num_ids));
  if (layout.num_prompt_rows > 0)
    backend_.copy_to_host_async(slot.prompt_logits_host.view().slice_rows(0, layout.num_prompt_rows),
                                logits_.view().slice_rows(layout.num_logits_rows, layout.num_forward_rows()));
  const int64_t n = layout.num_logprob_rows;
  if (n > 0) {
    backend_.copy_to_host_async(slot.logprob_ids_host.view().slice_rows(0, n), logprob_ids_.view().slice_rows(0, n));
    backend_.copy_to_host_async(slot.logprob_values_host.view().slice_rows(0, n),
                                logprob_values_.view().slice_rows(0, n));
  }
  slot.done_mark = backend_.mark();
}

StepResult ModelRunner::read_back(const StepPlan& plan, const StepSlot& slot) const {
  const StepLayout& layout = *slot.layout;
  const int32_t* ids = slot.ids_host.ptr<int32_t>();
  StepResult result;
  int64_t r = 0, penalised = 0, logprob_row = 0;
  for (const ScheduledRequest& row : plan.rows) {
    const SamplingParams& p = *row.sampling;
    for (int position = 0; position < row.num_sampled_tokens(); ++position, ++r) {  // pack()'s order
      const int64_t id_index = uses_penalised_copy(row) ? layout.num_logits_rows + penalised++ : r;
      SampledToken sampled{row.request_id, ids[id_index], std::nullopt};
      if (p.num_logprobs.has_value()) {
        const int32_t* top_ids = slot.logprob_ids_host.ptr<int32_t>() + logprob_row * kLogprobColumns;
        const float* top_values = slot.logprob_values_host.ptr<float>() + logprob_row * kLogprobColumns;
        ++logprob_row;
        SampledLogprobs logprobs;
        logprobs.sampled_logprob = top_values[0];  // top_ids[0] is the sampled id
        for (int32_t j = 1; j <= num_top_logprobs(p) && top_ids[j] >= 0; ++j)
          logprobs.top.push_back({top_ids[j], top_values[j]});
        sampled.logprobs = std::move(logprobs);
      }
      result.sampled.push_back(std::move(sampled));
    }
  }
  return result;
}

std::vector<PromptLogprobs> ModelRunner::read_prompt_logprobs(const StepPlan& plan, const StepSlot& slot) const {
  // On the host, whatever the backend: the rows came back whole (queue_read_back), so CPU and GPU
  // give the same numbers through the CPU twin of Backend::logprobs, and the rank needs the row.
  const int64_t num_rows = slot.layout->num_prompt_rows, vocab = model_.config().vocab_size;
  std::vector<int32_t> targets, top_ids(static_cast<size_t>(num_rows * kLogprobColumns));
  std::vector<sampling::LogprobRow> rows;
  std::vector<float> top_values(top_ids.size());
  for (const ScheduledRequest& row : plan.rows)
    for (TokenId target : row.prompt_logprob_targets) {
      const int32_t i = static_cast<int32_t>(rows.size());
      rows.push_back({i, i, std::clamp(row.sampling->num_prompt_logprobs.value_or(0), 0, sampling::kMaxTopLogprobs)});
      targets.push_back(target);
    }
  CHECK(static_cast<int64_t>(rows.size()) == num_rows);
  const TensorView logits = slot.prompt_logits_host.view().slice_rows(0, num_rows);  // [X, vocab]
  logprobs_on_host(TensorView(top_ids.data(), {num_rows, kLogprobColumns}, DType::kI32),
                   TensorView(top_values.data(), {num_rows, kLogprobColumns}, DType::kF32), logits,
                   TensorView(targets.data(), {num_rows}, DType::kI32),
                   TensorView(rows.data(), {num_rows, static_cast<int64_t>(sizeof(sampling::LogprobRow))}, DType::kU8));
  std::vector<PromptLogprobs> result;
  std::vector<float> x(static_cast<size_t>(vocab));
  int64_t i = 0;
  for (const ScheduledRequest& row : plan.rows) {
    if (row.prompt_logprob_targets.empty()) continue;
    PromptLogprobs out{row.request_id, row.start_pos + 1, {}};
    for (size_t j = 0; j < row.prompt_logprob_targets.size(); ++j, ++i) {
      const int32_t* ids = top_ids.data() + i * kLogprobColumns;
      const float* values = top_values.data() + i * kLogprobColumns;
      // vLLM's rank: how many tokens are at least as likely as the prompt token (1 = the most likely).
      convert_to_f32(logits.ptr<const char>() + i * vocab * static_cast<int64_t>(dtype_size_bytes(logits.dtype)),
                     logits.dtype, x.data(), x.size());
      const float target_logit = x[static_cast<size_t>(ids[0])];
      PromptTokenLogprobs token{ids[0], values[0], std::count_if(x.begin(), x.end(), [&](float v) { return v >= target_logit; }), {}};
      for (int32_t k = 1; k <= rows[static_cast<size_t>(i)].num_top && ids[k] >= 0; ++k) token.top.push_back({ids[k], values[k]});
      out.tokens.push_back(std::move(token));
    }
    result.push_back(std::move(out));
  }
  return result;
}

}  // namespace pagellm
