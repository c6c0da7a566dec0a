#include "model/step_wire.h"

#include <cstring>
#include <map>

namespace pagellm {

namespace {

constexpr uint32_t kStepMagic = 0x50455453;  // "STEP"

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_shape(const Shape& shape) {
    put<int32_t>(shape.ndim);
    for (int d = 0; d < shape.ndim; ++d) put<int64_t>(shape[d]);
  }
  // A view (data read through `backend`) or its absence.
  void put_tensor(const TensorView& view, Backend& backend) {
    put<uint8_t>(view.data != nullptr ? 1 : 0);
    if (view.data == nullptr) return;
    put_shape(view.shape);
    put<uint32_t>(static_cast<uint32_t>(view.dtype));
    Tensor host = Tensor::cpu(view.shape, view.dtype);
    backend.copy(host.view(), view);
    const size_t n = static_cast<size_t>(view.numel()) * dtype_size_bytes(view.dtype);
    bytes.insert(bytes.end(), host.ptr<uint8_t>(), host.ptr<uint8_t>() + n);
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  T get() {
    T value{};
    take(&value, sizeof(T));
    return value;
  }
  Shape get_shape() {
    Shape shape;
    shape.ndim = get<int32_t>();
    if (shape.ndim < 0 || shape.ndim > kMaxDims) {
      ok_ = false;
      shape.ndim = 0;
    }
    for (int d = 0; d < shape.ndim; ++d) shape[d] = get<int64_t>();
    return shape;
  }
  TensorView get_tensor(std::vector<Tensor>& keep) {
    if (get<uint8_t>() == 0) return {};
    const Shape shape = get_shape();
    const auto dtype = static_cast<DType>(get<uint32_t>());
    if (!ok_ || shape.numel() < 0) return {};
    Tensor host = Tensor::cpu(shape, dtype);
    take(host.ptr<void>(), static_cast<size_t>(shape.numel()) * dtype_size_bytes(dtype));
    keep.push_back(host);
    return host.view();
  }
  bool failed() const { return !ok_; }
  bool ok() const { return ok_ && at_ == bytes_.size(); }

 private:
  void take(void* out, size_t n) {
    if (!ok_ || at_ + n > bytes_.size()) {
      ok_ = false;
      std::memset(out, 0, n);
      return;
    }
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

CacheLayout layout_of(const CacheViews& caches) {
  CacheLayout layout;
  std::map<const void*, int32_t> index;  // a tensor shared by several layers is listed once
  auto add = [&](const TensorView& t) {
    const auto [it, added] = index.emplace(t.data, static_cast<int32_t>(layout.tensors.size()));
    if (added) layout.tensors.push_back({t.shape, t.dtype});
    return it->second;
  };
  for (const KvCacheView& layer : caches.attention_layers)
    layout.attention_layers.push_back({add(layer.k), add(layer.v), layer.group});
  for (const GdnStateView& layer : caches.gdn_layers) layout.gdn_layers.push_back({add(layer.conv), add(layer.recurrent)});
  return layout;
}

const void* cache_identity(const CacheViews& caches) {
  return !caches.attention_layers.empty() ? caches.attention_layers[0].k.data
         : !caches.gdn_layers.empty()     ? caches.gdn_layers[0].conv.data
                                          : nullptr;
}

CacheViews allocate_caches(const CacheLayout& layout, Backend& backend, std::vector<Tensor>& keep) {
  keep.clear();
  // Never read before written: KV slots through the slot mapping, state slots after their init.
  for (const CacheLayout::TensorSpec& spec : layout.tensors) keep.push_back(backend.alloc(spec.shape, spec.dtype));
  CacheViews views;
  auto at = [&](int32_t i) { return keep.at(static_cast<size_t>(i)).view(); };
  for (const CacheLayout::AttentionLayer& layer : layout.attention_layers)
    views.attention_layers.push_back({at(layer.k), at(layer.v), layer.group});
  for (const CacheLayout::GdnLayer& layer : layout.gdn_layers) views.gdn_layers.push_back({at(layer.conv), at(layer.recurrent)});
  return views;
}

// Repeats on a rank's own GDN state what the runner's StateCache did to rank 0's this step.
void apply_state_slot_inits(Backend& backend, const std::vector<StateSlotInit>& inits, const CacheViews& caches) {
  if (inits.empty() || caches.gdn_layers.empty()) return;
  const GdnStateView& first = caches.gdn_layers[0];
  auto zeros_like_slot = [](const TensorView& state) {
    Shape one = state.shape;
    one[0] = 1;
    return Tensor::cpu(one, state.dtype);  // zeroed
  };
  const Tensor zero_conv = zeros_like_slot(first.conv), zero_recurrent = zeros_like_slot(first.recurrent);
  for (const StateSlotInit& init : inits)
    for (const GdnStateView& layer : caches.gdn_layers) {
      const int32_t s = init.slot, f = init.from;
      backend.copy(layer.conv.slice_rows(s, s + 1), f < 0 ? zero_conv.view() : layer.conv.slice_rows(f, f + 1));
      backend.copy(layer.recurrent.slice_rows(s, s + 1),
                   f < 0 ? zero_recurrent.view() : layer.recurrent.slice_rows(f, f + 1));
    }
  backend.synchronize();  // the host zeros go at the end of this function
}

StepBatch copy_step_inputs(const StepBatch& batch, Backend& backend, std::vector<Tensor>& keep) {
  keep.clear();
  auto copy = [&](const TensorView& from) {
    if (from.data == nullptr) return from;
    Tensor mine = backend.alloc(from.shape, from.dtype);
    backend.copy(mine.view(), from);
    keep.push_back(mine);
    return mine.view();
  };
  StepBatch out = batch;
  for (TensorView* v : {&out.token_ids, &out.positions, &out.cu_seqlens_q, &out.seq_lens_k, &out.block_tables,
                        &out.slot_mapping, &out.logits_rows, &out.state_slots, &out.gdn_checkpoint_slots})
    *v = copy(*v);
  for (TensorView& v : out.more_block_tables) v = copy(v);
  for (TensorView& v : out.more_slot_mappings) v = copy(v);
  return out;
}

std::vector<uint8_t> encode_step(const StepBatch& batch, Backend& backend, const CacheLayout* layout) {
  Writer w;
  w.put(kStepMagic);
  w.put<int64_t>(batch.num_tokens);
  w.put<int64_t>(batch.num_seqs);
  w.put<int32_t>(batch.max_seqlen_q);
  w.put<int32_t>(batch.max_seqlen_k);
  w.put<uint8_t>(batch.has_draft_rows ? 1 : 0);
  for (const TensorView* v : {&batch.token_ids, &batch.positions, &batch.cu_seqlens_q, &batch.seq_lens_k,
                              &batch.block_tables, &batch.slot_mapping, &batch.logits_rows, &batch.state_slots,
                              &batch.gdn_checkpoint_slots})
    w.put_tensor(*v, backend);
  w.put<uint32_t>(static_cast<uint32_t>(batch.more_block_tables.size()));
  for (size_t g = 0; g < batch.more_block_tables.size(); ++g) {
    w.put_tensor(batch.more_block_tables[g], backend);
    w.put_tensor(batch.more_slot_mappings.at(g), backend);
  }
  w.put<uint32_t>(static_cast<uint32_t>(batch.state_slot_inits.size()));
  for (const StateSlotInit& init : batch.state_slot_inits) w.put(init);
  w.put<uint8_t>(layout != nullptr ? 1 : 0);
  if (layout != nullptr) {
    w.put<uint32_t>(static_cast<uint32_t>(layout->tensors.size()));
    for (const CacheLayout::TensorSpec& t : layout->tensors) {
      w.put_shape(t.shape);
      w.put<uint32_t>(static_cast<uint32_t>(t.dtype));
    }
    w.put<uint32_t>(static_cast<uint32_t>(layout->attention_layers.size()));
    for (const CacheLayout::AttentionLayer& layer : layout->attention_layers) w.put(layer);
    w.put<uint32_t>(static_cast<uint32_t>(layout->gdn_layers.size()));
    for (const CacheLayout::GdnLayer& layer : layout->gdn_layers) w.put(layer);
  }
  return std::move(w.bytes);
}

Expected<DecodedStep> decode_step(const std::vector<uint8_t>& bytes) {
  Reader r(bytes);
  DecodedStep step;
  if (r.get<uint32_t>() != kStepMagic) return invalid_argument("[tp] a step message without its magic number");
  StepBatch& b = step.batch;
  b.num_tokens = r.get<int64_t>();
  b.num_seqs = r.get<int64_t>();
  b.max_seqlen_q = r.get<int32_t>();
  b.max_seqlen_k = r.get<int32_t>();
  b.has_draft_rows = r.get<uint8_t>() == 1;
  for (TensorView* v : {&b.token_ids, &b.positions, &b.cu_seqlens_q, &b.seq_lens_k, &b.block_tables, &b.slot_mapping,
                        &b.logits_rows, &b.state_slots, &b.gdn_checkpoint_slots})
    *v = r.get_tensor(step.inputs);
  const uint32_t groups = r.get<uint32_t>();
  for (uint32_t g = 0; g < groups && !r.failed(); ++g) {
    b.more_block_tables.push_back(r.get_tensor(step.inputs));
    b.more_slot_mappings.push_back(r.get_tensor(step.inputs));
  }
  const uint32_t inits = r.get<uint32_t>();
  for (uint32_t i = 0; i < inits && !r.failed(); ++i) b.state_slot_inits.push_back(r.get<StateSlotInit>());
  step.has_layout = r.get<uint8_t>() == 1;
  if (step.has_layout) {
    CacheLayout& layout = step.layout;
    const uint32_t tensors = r.get<uint32_t>();
    for (uint32_t i = 0; i < tensors && !r.failed(); ++i) {
      CacheLayout::TensorSpec spec;
      spec.shape = r.get_shape();
      spec.dtype = static_cast<DType>(r.get<uint32_t>());
      layout.tensors.push_back(spec);
    }
    const uint32_t attention = r.get<uint32_t>();
    for (uint32_t i = 0; i < attention && !r.failed(); ++i)
      layout.attention_layers.push_back(r.get<CacheLayout::AttentionLayer>());
    const uint32_t gdn = r.get<uint32_t>();
    for (uint32_t i = 0; i < gdn && !r.failed(); ++i) layout.gdn_layers.push_back(r.get<CacheLayout::GdnLayer>());
  }
  const auto num_tensors = static_cast<int32_t>(step.layout.tensors.size());
  auto in_range = [&](int32_t i) { return i >= 0 && i < num_tensors; };
  bool indices_ok = true;
  for (const CacheLayout::AttentionLayer& layer : step.layout.attention_layers)
    indices_ok = indices_ok && in_range(layer.k) && in_range(layer.v);
  for (const CacheLayout::GdnLayer& layer : step.layout.gdn_layers)
    indices_ok = indices_ok && in_range(layer.conv) && in_range(layer.recurrent);
  if (!r.ok() || !indices_ok) return invalid_argument("[tp] a step message of {} bytes does not parse", bytes.size());
  return step;
}

}  // namespace pagellm
