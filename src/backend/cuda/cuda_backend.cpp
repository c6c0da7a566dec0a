// CudaBackend: validates views on the host (CHECK, like the CPU twin), flattens them into the plain
// launch structs of kernels.h and queues the work on one stream. Everything is stream-ordered:
// allocations come from the device's stream-ordered pool (cudaMallocAsync), so the per-step buffers
// the model runner allocates cost no device-wide synchronisation; only copies into host memory and
// synchronize() wait for the GPU.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "backend/cuda/cublaslt_fp8_matmul.h"
#include "backend/cuda/cublaslt_matmul.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_group_quant.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/int4_gemm.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/quant_gemv.h"
#include "backend/cuda/sampling.h"

namespace pagellm {

namespace {

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

int compute_capability_major(int device) {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// The rows of a view whose last dim is contiguous (the CPU's RowLayout, for the device).
cuda::Rows rows_of(const TensorView& v, const char* op, const char* name) {
  CHECK_MSG(v.device == Device::kCuda, "[cuda] {}: {} is not on the GPU", op, name);
  CHECK_MSG(v.ndim() >= 1 && v.ndim() <= 3, "[cuda] {}: {} must have 1-3 dims, got {}", op, name, v.shape.to_string());
  CHECK_MSG(v.numel() == 0 || v.strides[static_cast<size_t>(v.ndim() - 1)] == 1,
            "[cuda] {}: the last dim of {} must be contiguous", op, name);
  cuda::Rows rows;
  rows.data = v.data;
  rows.row_size = v.size(-1);
  if (v.ndim() == 1) {
    rows.num_rows = 1;
  } else if (v.ndim() == 2) {
    rows.num_rows = v.size(0);
    rows.outer_stride = v.strides[0];
  } else {
    rows.inner_rows = std::max<int64_t>(v.size(1), 1);
    rows.num_rows = v.size(0) * v.size(1);
    rows.outer_stride = v.strides[0];
    rows.inner_stride = v.strides[1];
  }
  return rows;
}

void check_same_rows(const cuda::Rows& a, const cuda::Rows& b, const char* op) {
  CHECK_MSG(a.num_rows == b.num_rows && a.row_size == b.row_size, "[cuda] {}: {} rows of {} vs {} rows of {}", op,
            a.num_rows, a.row_size, b.num_rows, b.row_size);
}

void check_dtype(const TensorView& v, DType want, const char* op, const char* name) {
  CHECK_MSG(v.dtype == want, "[cuda] {}: {} is {}, expected {} (one dtype per op on the GPU)", op, name,
            dtype_name(v.dtype), dtype_name(want));
}

// A norm's weight for rows of `row_size`: the rows' dtype, contiguous [row_size] on the GPU.
void check_norm_weight(const TensorView& w, DType dtype, int64_t row_size, const char* op) {
  check_dtype(w, dtype, op, "w");
  CHECK_MSG(w.device == Device::kCuda && w.numel() == row_size && w.is_contiguous(),
            "[cuda] {}: w{} does not match rows of {}", op, w.shape.to_string(), row_size);
}

// add_rms_norm's views (hidden, normed, delta: equal rows of one dtype; w), checked for `op`.
void check_add_norm_views(const cuda::Rows& h, const cuda::Rows& n, const cuda::Rows& d, const TensorView& hidden,
                          const TensorView& normed, const TensorView& delta, const TensorView& w, const char* op) {
  check_same_rows(h, n, op);
  check_same_rows(h, d, op);
  check_dtype(normed, hidden.dtype, op, "normed");
  check_dtype(delta, hidden.dtype, op, "delta");
  check_norm_weight(w, hidden.dtype, h.row_size, op);
}

// A Linear's bias for `columns` outputs: x's dtype, contiguous [columns] on the GPU.
void check_bias(const TensorView& bias, DType dtype, int64_t columns, const char* op) {
  check_dtype(bias, dtype, op, "bias");
  CHECK_MSG(bias.device == Device::kCuda && bias.numel() == columns && bias.is_contiguous(),
            "[cuda] {}: bias{} for rows of {}", op, bias.shape.to_string(), columns);
}

void check_index_vector(const TensorView& v, DType dtype, int64_t numel, const char* op, const char* name) {
  CHECK_MSG(v.device == Device::kCuda && v.dtype == dtype && v.numel() == numel && v.is_contiguous(),
            "[cuda] {}: {} must be a contiguous [{}] {} tensor on the GPU, got {} {}", op, name, numel,
            dtype_name(dtype), v.shape.to_string(), dtype_name(v.dtype));
}

// The MoE routing ops' views (moe_route, moe_route_group): logits [T, E] rows, topk_ids / topk_weights [T, k].
cuda::Rows check_route_views(const TensorView& topk_ids, const TensorView& topk_weights, const TensorView& logits,
                             const char* op) {
  const cuda::Rows rows = rows_of(logits, op, "logits");
  CHECK_MSG(logits.ndim() == 2 && is_float(logits.dtype) && topk_ids.ndim() == 2 && topk_ids.size(0) == rows.num_rows,
            "[cuda] {}: logits{} topk_ids{}", op, logits.shape.to_string(), topk_ids.shape.to_string());
  check_index_vector(topk_ids, DType::kI32, topk_ids.numel(), op, "topk_ids");
  check_index_vector(topk_weights, DType::kF32, topk_ids.numel(), op, "topk_weights");
  CHECK_MSG(rows.row_size <= 2048 && topk_ids.size(1) >= 1 && topk_ids.size(1) <= rows.row_size,
            "[cuda] {}: top {} of {} experts (the routing kernel takes at most 2048 experts)", op, topk_ids.size(1),
            rows.row_size);
  return rows;
}

// The grouping's views (moe_group, moe_route_group) for `pairs` ids over num_experts experts.
void check_group_views(const TensorView& tile_pairs, const TensorView& tile_experts, int64_t pairs,
                       int64_t num_experts, const char* op) {
  const int64_t num_tiles = tile_experts.numel();
  check_index_vector(tile_experts, DType::kI32, num_tiles, op, "tile_experts");
  check_index_vector(tile_pairs, DType::kI32, num_tiles * kMoeTileRows, op, "tile_pairs");
  CHECK_MSG(num_tiles >= moe_max_tiles(pairs, num_experts), "[cuda] {}: {} tiles for {} pairs over {} experts", op,
            num_tiles, pairs, num_experts);
  CHECK_MSG(num_experts <= 512, "[cuda] {}: {} experts; the grouping kernel takes at most 512", op, num_experts);
}

// The caches' element type and scales: the rows' dtype `dtype` (scales unused), or f8_e4m3 (the FP8 KV
// cache, scales > 0). Both caches must agree.
cuda::KvFormat kv_format(const TensorView& k_cache, const TensorView& v_cache, DType dtype, const KvScales& scales,
                         const char* op) {
  CHECK_MSG(k_cache.dtype == v_cache.dtype && (k_cache.dtype == dtype || k_cache.dtype == DType::kF8E4M3),
            "[cuda] {}: caches {} / {} for rows of {} (the rows' dtype or f8_e4m3)", op, dtype_name(k_cache.dtype),
            dtype_name(v_cache.dtype), dtype_name(dtype));
  cuda::KvFormat format;
  format.cache_dtype = k_cache.dtype;
  if (format.cache_dtype == DType::kF8E4M3) {
    CHECK_MSG(scales.k_scale > 0 && scales.v_scale > 0, "[cuda] {}: FP8 cache scales must be > 0, got k {} v {}", op,
              scales.k_scale, scales.v_scale);
    format.k_scale = scales.k_scale;
    format.v_scale = scales.v_scale;
  }
  return format;
}

cuda::CacheLayout cache_layout(const TensorView& cache, const char* op, const char* name) {
  CHECK_MSG(cache.device == Device::kCuda && cache.ndim() == 4 && cache.strides[3] == 1,
            "[cuda] {}: {} must be [num_blocks, block_size, num_kv_heads, head_dim] on the GPU, got {}", op, name,
            cache.shape.to_string());
  cuda::CacheLayout layout;
  layout.num_blocks = cache.size(0);
  layout.block_size = cache.size(1);
  layout.num_kv_heads = cache.size(2);
  layout.head_dim = cache.size(3);
  layout.stride_block = cache.strides[0];
  layout.stride_slot = cache.strides[1];
  layout.stride_head = cache.strides[2];
  return layout;
}

// Row pitch in bytes when every row of the view is one pitch after the previous (so one 2-D copy
// moves it), else -1.
int64_t uniform_pitch_bytes(const cuda::Rows& rows, DType dtype) {
  const int64_t elem = static_cast<int64_t>(dtype_size_bytes(dtype));
  if (rows.num_rows <= 1) return rows.row_size * elem;
  if (rows.inner_rows == 1) return rows.outer_stride * elem;
  if (rows.inner_rows * rows.inner_stride == rows.outer_stride || rows.num_rows == rows.inner_rows)
    return rows.inner_stride * elem;
  return -1;
}

int64_t element_offset(const cuda::Rows& rows, int64_t r) {
  return (r / rows.inner_rows) * rows.outer_stride + (r % rows.inner_rows) * rows.inner_stride;
}

cuda::Rows host_rows(const TensorView& v) {
  TensorView as_device = v;
  as_device.device = Device::kCuda;  // only the layout is read
  return rows_of(as_device, "copy", "a host view");
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::shared_ptr<CUstream_st> stream, int num_sms)
      : device_(device), stream_(std::move(stream)), num_sms_(num_sms),
        matmul_(std::make_unique<cuda::CublasLtMatmul>(stream_.get(), num_sms)),
        quant_gemv_supported_(cuda::quant_gemv_device_supported(device)),
        int4_gemm_supported_(cuda::int4_gemm_device_supported(device)),
        fp8_block_scaling_supported_(compute_capability_major(device) == 9) {}

  Device device() const override { return Device::kCuda; }
  std::string name() const override { return "cuda"; }
  // bf16 checkpoints keep bf16 weights (half the bytes of f32, and the tensor cores' type); f32
  // checkpoints run f32 with f32 GEMMs (no TF32).
  DType weight_dtype(DType activation_dtype) const override { return activation_dtype; }
  int64_t free_memory_bytes() const override;
  Tensor alloc(Shape shape, DType dtype) override;
  void copy(TensorView dst, const TensorView& src) override;
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream())); }
  void make_current() override { CUDA_CHECK(cudaSetDevice(device_)); }
  int device_index() const override { return device_; }
  void set_kernel_options(const KernelOptions& options) override { kernel_options_ = options; }
  KernelOptions kernel_options() const override { return kernel_options_; }
  CudaPlacement placement() const { return {device_, stream_.get()}; }
  Tensor alloc_host(Shape shape, DType dtype) override;
  void copy_to_host_async(TensorView dst, const TensorView& src) override;
  uint64_t mark() override;
  void wait_for(uint64_t mark) override;
  void wait_for_work_of(Backend& other) override;
  void copy_ids(TensorView dst, const TensorView& src, const TensorView& pairs) override;
  std::unique_ptr<OpGraph> capture(const std::function<void()>& record) override;

  void matmul(TensorView out, const TensorView& x, const TensorView& w) override;
  void matmul_bias(TensorView out, const TensorView& x, const TensorView& w, const TensorView& bias) override;
  // Quantized weights (quant_gemv.h): the GEMV for decode-sized products; for larger ones FP8 blocks of
  // 128 x 128 go W8A8 to the FP8 tensor cores (cublaslt_fp8_matmul.h), INT4 of small batches on large
  // weights to the in-register-dequantizing GEMM (int4_gemm.h), everything else is dequantized + cuBLASLt.
  void matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                        int64_t block_n, int64_t block_k) override;
  void matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                   const TensorView& zeros, int64_t group_size) override;
  void matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales) override;
  void quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) override;  // fp8_group_quant.cu
  void rms_norm(TensorView out, const TensorView& x, const TensorView& w, float eps, NormWeight mode) override;
  void add(TensorView out, const TensorView& a, const TensorView& b) override;
  void rope(TensorView x, const TensorView& positions, const TensorView& inv_freq, float attention_scaling) override;
  void act_mul(TensorView out, const TensorView& gate_up, Activation act) override;
  void add_bias(TensorView x, const TensorView& bias) override;
  void scale(TensorView out, const TensorView& x, float s) override;
  void softcap(TensorView x, float cap) override;
  void apply_token_bitmask(TensorView logits, const TensorView& bitmask, const TensorView& rows) override;
  void add_logit_bias(TensorView logits, const TensorView& entries) override;
  void embedding(TensorView out, const TensorView& table, const TensorView& ids) override;
  void write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k, const TensorView& v,
                const TensorView& slot_mapping, const KvScales& scales = {}) override;
  void attention(TensorView out, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                 const AttentionParams& params) override;
  void argmax(TensorView ids, const TensorView& logits) override;
  void log_softmax(TensorView out, const TensorView& logits) override;
  void sample(TensorView ids, const TensorView& logits, const TensorView& params) override;  // sampling.cu
  void apply_penalties(TensorView out, const TensorView& logits, const TensorView& rows,
                       const TensorView& history) override;  // sampling.cu
  void logprobs(TensorView out_ids, TensorView out_logprobs, const TensorView& logits, const TensorView& ids,
                const TensorView& rows) override;  // sampling.cu
  void add_rms_norm(TensorView hidden, TensorView normed, const TensorView& delta, const TensorView& w, float eps,
                    NormWeight mode) override;
  void add_gather_rms_norm(TensorView last, TensorView hidden, const TensorView& delta, const TensorView& rows,
                           const TensorView& w, float eps, NormWeight mode) override;
  void qk_norm_rope_write_kv(TensorView q, TensorView k, const TensorView& v, const TensorView& q_norm,
                             const TensorView& k_norm, float eps, NormWeight mode, const TensorView& positions,
                             const TensorView& inv_freq, float attention_scaling, TensorView k_cache,
                             TensorView v_cache, const TensorView& slot_mapping, const KvScales& scales = {}) override;
  // Hybrid models (gdn.cu).
  void gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                  const GdnParams& params) override;
  void gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& a, const TensorView& b, const TensorView& A_log, const TensorView& dt_bias,
                      TensorView state, const GdnParams& params) override;
  void gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w,
                      float eps) override;
  void sigmoid_mul(TensorView out, const TensorView& x, const TensorView& gate) override;
  void moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits, MoeRouting routing,
                 bool renormalize) override;
  void moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids,
                 int64_t num_experts) override;
  void moe_route_group(TensorView topk_ids, TensorView topk_weights, TensorView tile_pairs, TensorView tile_experts,
                       const TensorView& logits, MoeRouting routing, bool renormalize) override;
  void moe_expert_gemm(TensorView out, const TensorView& x, const MoeExpertWeights& w, const TensorView& tile_pairs,
                       const TensorView& tile_experts, int64_t pairs_per_x_row, std::optional<Activation> act) override;
  void moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids,
                   const TensorView& topk_weights, bool accumulate) override;
  void moe_combine_add_rms_norm(TensorView out, TensorView hidden, TensorView normed, const TensorView& y,
                                const TensorView& topk_ids, const TensorView& topk_weights, bool accumulate,
                                const TensorView& w, float eps, NormWeight mode) override;
  void add_rows_scaled(TensorView out, const TensorView& x, const TensorView& row_ids,
                       const TensorView& weights) override;

 private:
  cudaStream_t stream() const { return stream_.get(); }
  // matmul with the GEMV's bias epilogue where it runs (bias nullptr: none); returns whether the bias
  // was added.
  bool dense_matmul(TensorView out, const TensorView& x, const TensorView& w, const void* bias);
  void quant_matmul(TensorView out, const TensorView& x, const cuda::QuantWeight& w, const char* op);
  bool fp8_w8a8_matmul(void* out, int64_t ld_out, const TensorView& x, int64_t ld_x, const cuda::QuantWeight& w,
                       const char* op);
  bool is_capturing() const;
  void* grow_only(Tensor& workspace, uint64_t& workspace_captures, size_t bytes, const char* op, const char* what);

  int device_;
  // Shared with every allocation's deleter (cudaFreeAsync on this stream), so tensors may outlive
  // the backend object.
  std::shared_ptr<CUstream_st> stream_;
  int num_sms_;
  KernelOptions kernel_options_;  // set_kernel_options; the defaults until then
  std::unique_ptr<cuda::CublasLtMatmul> matmul_;
  bool quant_gemv_supported_ = false;  // the device runs quant_gemv.cu's mma.sync (compute capability 8.0+)
  bool int4_gemm_supported_ = false;  // the device runs int4_gemm.cu (8.0+, its shared memory)
  // The dequantized copy of one quantized weight ([N, K] of x's dtype, as bytes), grow-only. It must
  // not grow inside a CUDA graph capture: the engine's activation profile (a max_num_batched_tokens
  // step, before any capture) multiplies every weight through it first, and its size depends on
  // N * K only, not on M.
  Tensor dequant_workspace_;
  uint64_t dequant_workspace_captures_ = 0;  // num_captures_ when it was allocated
  // W8A8 (compute capability 9.0: cuBLASLt's FP8 block scaling is Hopper's): the cuBLASLt plans, made
  // at the first such product, and one grow-only workspace holding x in FP8 [M, K], its scales
  // [K / 128, M] f32 and, where K % 512 != 0, the weight's scales padded to cuBLASLt's pitch. Its size
  // grows with M * K, so the rule is the dequantization workspace's: it never grows inside a capture,
  // and the engine's activation profile (every weight at M = max_num_batched_tokens, before any
  // capture) sizes it for every later M up to that, decode graphs of 9..256 rows included.
  bool fp8_block_scaling_supported_ = false;
  std::unique_ptr<cuda::CublasLtFp8Matmul> fp8_matmul_;
  Tensor w8a8_workspace_;
  uint64_t w8a8_workspace_captures_ = 0;  // num_captures_ when it was allocated
  uint64_t num_captures_ = 0;                // capture() calls so far
  Tensor attention_partials_;  // grow-only scratch of split attention, f32
  Tensor moe_fold_scratch_;    // the tiled expert GEMM's running sums of K segments (f32, fixed size)
  uint64_t moe_fold_scratch_captures_ = 0;
  Tensor gdn_chunk_scratch_;   // grow_only scratch of the chunked delta rule (f32)
  uint64_t gdn_chunk_scratch_captures_ = 0;
  Tensor argmax_scratch_, argmax_values_;  // [rows * kArgmaxScratchPerRow] i64 / f32, grow-only
  // [rows * vocab] i32 (read as u32 occurrence words), grow-only; all zero between apply_penalties calls.
  Tensor penalty_words_;
  // Scratch outgrown by a later call stays allocated: a captured graph may still point at it.
  std::vector<Tensor> retired_;
  // mark(): a ring of events, created at the first mark; mark m is event m % kMarkEvents, so only the
  // kMarkEvents newest marks are exact (an older one waits for a newer event, which is later work).
  static constexpr uint64_t kMarkEvents = 8;
  std::vector<cudaEvent_t> mark_events_;
  uint64_t num_marks_ = 0;
  // wait_for_work_of(): recorded on this stream when another backend waits for it (one event does:
  // a wait takes the record queued before it), created on this GPU at the first such wait.
  cudaEvent_t handoff_event_ = nullptr;

 public:
  ~CudaBackend() override {
    for (cudaEvent_t event : mark_events_) (void)cudaEventDestroy(event);
    if (handoff_event_ != nullptr) (void)cudaEventDestroy(handoff_event_);
  }
};

// A captured stream of work, replayed on the stream it was captured from.
class CudaGraph final : public OpGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, std::shared_ptr<CUstream_st> stream) : exec_(exec), stream_(std::move(stream)) {}
  ~CudaGraph() override { (void)cudaGraphExecDestroy(exec_); }
  void replay() override { CUDA_CHECK(cudaGraphLaunch(exec_, stream_.get())); }

 private:
  cudaGraphExec_t exec_;
  std::shared_ptr<CUstream_st> stream_;
};

Tensor CudaBackend::alloc_host(Shape shape, DType dtype) {
  TensorView view(nullptr, shape, dtype, Device::kCpu);
  const size_t bytes = view.nbytes();
  if (bytes == 0) return Tensor(view, nullptr);
  void* ptr = nullptr;
  CUDA_CHECK(cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
  std::memset(ptr, 0, bytes);
  view.data = ptr;
  return Tensor(view, std::shared_ptr<void>(ptr, [](void* p) { (void)cudaFreeHost(p); }));
}

uint64_t CudaBackend::mark() {
  if (mark_events_.empty()) {
    mark_events_.resize(kMarkEvents);
    for (cudaEvent_t& event : mark_events_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  const uint64_t m = num_marks_++;
  CUDA_CHECK(cudaEventRecord(mark_events_[m % kMarkEvents], stream()));
  return m;
}

void CudaBackend::wait_for(uint64_t mark) {
  CHECK_MSG(mark < num_marks_, "[cuda] wait_for({}) of a mark not made yet ({} made)", mark, num_marks_);
  CUDA_CHECK(cudaEventSynchronize(mark_events_[mark % kMarkEvents]));
}

void CudaBackend::wait_for_work_of(Backend& other_backend) {
  auto* other = dynamic_cast<CudaBackend*>(&other_backend);
  CHECK_MSG(other != nullptr, "[cuda] wait_for_work_of a {} backend", other_backend.name());
  if (other == this) return;
  int current = 0;
  CUDA_CHECK(cudaGetDevice(&current));
  // An event belongs to the GPU that was current when it was made, and is recorded on a stream of that GPU.
  CUDA_CHECK(cudaSetDevice(other->device_));
  if (other->handoff_event_ == nullptr)
    CUDA_CHECK(cudaEventCreateWithFlags(&other->handoff_event_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(other->handoff_event_, other->stream()));
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaStreamWaitEvent(stream(), other->handoff_event_, 0));
  CUDA_CHECK(cudaSetDevice(current));
}

void CudaBackend::copy_to_host_async(TensorView dst, const TensorView& src) {
  CHECK_MSG(dst.device == Device::kCpu && src.device == Device::kCuda && dst.is_contiguous() && src.is_contiguous() &&
                dst.numel() == src.numel() && dst.dtype == src.dtype,
            "[cuda] copy_to_host_async: contiguous {} {} on the GPU into {} {} on the host", src.shape.to_string(),
            dtype_name(src.dtype), dst.shape.to_string(), dtype_name(dst.dtype));
  if (dst.numel() == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream()));
}

void CudaBackend::copy_ids(TensorView dst, const TensorView& src, const TensorView& pairs) {
  CHECK_MSG(dst.device == Device::kCuda && dst.dtype == DType::kI32 && dst.is_contiguous(),
            "[cuda] copy_ids: dst must be a contiguous i32 vector on the GPU, got {} {}", dst.shape.to_string(),
            dtype_name(dst.dtype));
  check_index_vector(src, DType::kI32, src.numel(), "copy_ids", "src");
  CHECK_MSG(pairs.device == Device::kCuda && pairs.dtype == DType::kI32 && pairs.is_contiguous() && pairs.ndim() == 2 &&
                pairs.size(1) == 2,
            "[cuda] copy_ids: pairs must be contiguous [N, 2] i32 on the GPU, got {} {}", pairs.shape.to_string(),
            dtype_name(pairs.dtype));
  CUDA_CHECK(cuda::launch_copy_ids(dst.ptr<int32_t>(), dst.numel(), src.ptr<int32_t>(), src.numel(),
                                   pairs.ptr<int32_t>(), pairs.size(0), stream()));
}

std::unique_ptr<OpGraph> CudaBackend::capture(const std::function<void()>& record) {
  // Thread-local mode: only this thread's CUDA calls are checked against the capture, so a stray
  // synchronising call inside `record` fails loudly instead of another thread's work.
  ++num_captures_;
  CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal));
  record();
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  CUDA_CHECK(status);
  return std::make_unique<CudaGraph>(exec, stream_);
}

Tensor CudaBackend::alloc(Shape shape, DType dtype) {
  TensorView view(nullptr, shape, dtype, Device::kCuda);
  const size_t bytes = view.nbytes();
  if (bytes == 0) return Tensor(view, nullptr);
  void* ptr = nullptr;
  cudaError_t status = cudaMallocAsync(&ptr, bytes, stream());
  if (status == cudaErrorMemoryAllocation) {
    // Memory freed to the pool but not yet reusable on this stream: wait, trim the pool, try again.
    (void)cudaGetLastError();
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
    CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    status = cudaMallocAsync(&ptr, bytes, stream());
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    CHECK_MSG(false, "[cuda] out of GPU memory: asked for {} bytes ({:.1f} MiB) for a {} {} tensor; {:.1f} MiB free of {:.1f} MiB",
              bytes, bytes / 1048576.0, shape.to_string(), dtype_name(dtype), free_bytes / 1048576.0,
              total_bytes / 1048576.0);
  }
  CUDA_CHECK(status);
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream()));
  view.data = ptr;
  // The deleter cannot CHECK: at process exit the runtime may already be unloading.
  std::shared_ptr<void> owner(ptr, [stream = stream_](void* p) { (void)cudaFreeAsync(p, stream.get()); });
  return Tensor(view, std::move(owner));
}

int64_t CudaBackend::free_memory_bytes() const {
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // Memory freed into the stream-ordered pool is reusable by alloc() but not free to the driver.
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t reserved = 0, used = 0;
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return static_cast<int64_t>(free_bytes + (reserved > used ? reserved - used : 0));
}

namespace {

std::string where_pointer_lives(const void* ptr) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return fmt::format("{} (attributes: {})", ptr, cudaGetErrorName(status));
  }
  const char* type = attributes.type == cudaMemoryTypeDevice    ? "device"
                     : attributes.type == cudaMemoryTypeHost    ? "pinned host"
                     : attributes.type == cudaMemoryTypeManaged ? "managed"
                                                                : "unregistered host";
  return fmt::format("{} ({} memory of GPU {})", ptr, type, attributes.device);
}

// A failed copy names where each side lives and which GPU is current: the usual cause is memory of
// one GPU reached from another's stream.
[[noreturn]] void copy_failed(cudaError_t status, const char* call, const TensorView& dst, const TensorView& src,
                              int backend_device, cudaStream_t stream) {
  int current = -1, stream_device = -1;
  (void)cudaGetDevice(&current);
  (void)cudaStreamGetDevice(stream, &stream_device);
  (void)cudaGetLastError();
  ::pagellm::detail::check_failed(
      __FILE__, __LINE__, call,
      fmt::format("[cuda] copy of {} bytes from {} to {} failed: {} ({}); backend GPU {}, stream of GPU {}, current GPU {}",
                  src.nbytes(), where_pointer_lives(src.data), where_pointer_lives(dst.data), cudaGetErrorString(status),
                  cudaGetErrorName(status), backend_device, stream_device, current));
}

}  // namespace

void CudaBackend::copy(TensorView dst, const TensorView& src) {
  CHECK_MSG(dst.numel() == src.numel() && dst.dtype == src.dtype, "[cuda] copy {} {} -> {} {}", src.shape.to_string(),
            dtype_name(src.dtype), dst.shape.to_string(), dtype_name(dst.dtype));
  if (dst.numel() == 0) return;
  const bool from_host = src.device == Device::kCpu, to_host = dst.device == Device::kCpu;
  const cudaMemcpyKind kind = from_host ? (to_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                        : (to_host ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  if (dst.is_contiguous() && src.is_contiguous()) {
    const cudaError_t status = cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, stream());
    if (status != cudaSuccess) copy_failed(status, "cudaMemcpyAsync", dst, src, device_, stream());
  } else {
    // Strided rows (e.g. columns of a fused buffer): one 2-D copy when both sides have a uniform
    // row pitch, else one copy per row.
    const cuda::Rows in = host_rows(src), out = host_rows(dst);
    CHECK_MSG(in.row_size == out.row_size, "[cuda] copy rows of {} into rows of {}", in.row_size, out.row_size);
    const int64_t elem = static_cast<int64_t>(dtype_size_bytes(src.dtype));
    const int64_t row_bytes = in.row_size * elem;
    const int64_t in_pitch = uniform_pitch_bytes(in, src.dtype), out_pitch = uniform_pitch_bytes(out, dst.dtype);
    if (in_pitch >= row_bytes && out_pitch >= row_bytes) {
      CUDA_CHECK(cudaMemcpy2DAsync(dst.data, static_cast<size_t>(out_pitch), src.data, static_cast<size_t>(in_pitch),
                                   static_cast<size_t>(row_bytes), static_cast<size_t>(in.num_rows), kind, stream()));
    } else {
      for (int64_t r = 0; r < in.num_rows; ++r) {
        CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst.data) + element_offset(out, r) * elem,
                                   static_cast<const char*>(src.data) + element_offset(in, r) * elem,
                                   static_cast<size_t>(row_bytes), kind, stream()));
      }
    }
  }
  // The caller reads host memory right after copy() returns.
  if (to_host) CUDA_CHECK(cudaStreamSynchronize(stream()));
}

void CudaBackend::matmul(TensorView out, const TensorView& x, const TensorView& w) {
  dense_matmul(out, x, w, nullptr);
}

// The GEMV adds the bias in its epilogue (one launch less a biased Linear at decode); cuBLASLt's
// products take add_bias after them.
void CudaBackend::matmul_bias(TensorView out, const TensorView& x, const TensorView& w, const TensorView& bias) {
  check_bias(bias, x.dtype, w.size(0), "matmul_bias");
  if (!dense_matmul(out, x, w, bias.data)) add_bias(out, bias);
}

bool CudaBackend::dense_matmul(TensorView out, const TensorView& x, const TensorView& w, const void* bias) {
  CHECK_MSG(x.ndim() == 2 && w.ndim() == 2 && out.ndim() == 2, "[cuda] matmul wants 2-D x, w, out");
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  CHECK_MSG(w.size(1) == k && out.size(0) == m && out.size(1) == n, "[cuda] matmul shapes x{} w{} out{}",
            x.shape.to_string(), w.shape.to_string(), out.shape.to_string());
  CHECK_MSG(x.device == Device::kCuda && w.device == Device::kCuda && out.device == Device::kCuda,
            "[cuda] matmul operands must be on the GPU");
  check_dtype(w, x.dtype, "matmul", "w");
  check_dtype(out, x.dtype, "matmul", "out");
  if (m == 0 || n == 0) return true;
  CHECK_MSG(w.is_contiguous() && (x.strides[1] == 1 || k == 1) && (out.strides[1] == 1 || n == 1),
            "[cuda] matmul wants contiguous w and unit column strides");
  const int64_t ld_x = m > 1 ? x.strides[0] : k, ld_out = m > 1 ? out.strides[0] : n;
  return matmul_->run(x.dtype, out.data, ld_out, x.data, ld_x, w.data, k, m, n, k, kernel_options_.gemv, bias);
}

namespace {

size_t round_up_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_quant_tensor(const TensorView& v, DType dtype, int64_t rows, int64_t cols, const char* op,
                        const char* name) {
  CHECK_MSG(v.device == Device::kCuda && v.dtype == dtype && v.ndim() == 2 && v.is_contiguous() && v.size(0) == rows &&
                v.size(1) == cols,
            "[cuda] {}: {} must be a contiguous [{}, {}] {} tensor on the GPU, got {} {}", op, name, rows, cols,
            dtype_name(dtype), v.shape.to_string(), dtype_name(v.dtype));
}

}  // namespace

bool CudaBackend::is_capturing() const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream(), &capture));
  return capture != cudaStreamCaptureStatusNone;
}

void* CudaBackend::grow_only(Tensor& workspace, uint64_t& workspace_captures, size_t bytes, const char* op,
                             const char* what) {
  if (workspace.nbytes() >= bytes) return workspace.view().data;
  CHECK_MSG(!is_capturing(),
            "[cuda] {}: the {} workspace must grow to {} bytes (has {}) inside a CUDA graph capture; "
            "run a product of this weight and at least this many rows once before capturing (the engine's "
            "activation profile does)",
            op, what, bytes, workspace.nbytes());
  // A graph captured since the old workspace was allocated may point at it: keep it then. Otherwise
  // it is released (stream-ordered: work already queued still reads it first).
  if (workspace.defined() && num_captures_ != workspace_captures) retired_.push_back(std::move(workspace));
  workspace = Tensor();
  workspace = alloc(Shape{static_cast<int64_t>(bytes)}, DType::kU8);
  workspace_captures = num_captures_;
  return workspace.view().data;
}

void CudaBackend::quant_matmul(TensorView out, const TensorView& x, const cuda::QuantWeight& w, const char* op) {
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && is_float(x.dtype), "[cuda] {}: x and out must be 2-D f32/bf16/f16, got x {} {} out {}",
            op, x.shape.to_string(), dtype_name(x.dtype), out.shape.to_string());
  const int64_t m = x.size(0), n = w.n, k = w.k;
  CHECK_MSG(x.size(1) == k && out.size(0) == m && out.size(1) == n, "[cuda] {}: shapes x{} out{} for a [{}, {}] weight",
            op, x.shape.to_string(), out.shape.to_string(), n, k);
  CHECK_MSG(x.device == Device::kCuda && out.device == Device::kCuda, "[cuda] {}: x and out must be on the GPU", op);
  check_dtype(out, x.dtype, op, "out");
  if (m == 0 || n == 0) return;
  CHECK_MSG((x.strides[1] == 1 || k == 1) && (out.strides[1] == 1 || n == 1), "[cuda] {}: x and out need unit column strides",
            op);
  const int64_t ld_x = m > 1 ? x.strides[0] : k, ld_out = m > 1 ? out.strides[0] : n;
  if (quant_gemv_supported_ && kernel_options_.quant_gemv && cuda::quant_gemv_lane_bytes(x.dtype, w, x.data, ld_x, m) > 0) {
    CUDA_CHECK(cuda::launch_quant_gemv(x.dtype, out.data, ld_out, x.data, ld_x, w, m, num_sms_, stream()));
    return;
  }
  if (int4_gemm_supported_ && kernel_options_.quant_gemv &&
      cuda::int4_gemm_applies(x.dtype, w, x.data, ld_x, m, num_sms_)) {
    CUDA_CHECK(cuda::launch_int4_gemm(x.dtype, out.data, ld_out, x.data, ld_x, w, m, num_sms_, stream()));
    return;
  }
  // Larger products: W dequantized into x's dtype, then the dense matmul (cuBLASLt, or the bf16 GEMV).
  if (w.format == cuda::QuantFormat::kFp8Block && fp8_w8a8_matmul(out.data, ld_out, x, ld_x, w, op)) return;
  void* dense = grow_only(dequant_workspace_, dequant_workspace_captures_,
                          static_cast<size_t>(n * k) * dtype_size_bytes(x.dtype), op, "dequantization");
  CUDA_CHECK(cuda::launch_dequantize(x.dtype, dense, w, stream()));
  matmul_->run(x.dtype, out.data, ld_out, x.data, ld_x, dense, k, m, n, k, kernel_options_.gemv);
}

// W8A8: x quantized per token and 128-group into FP8 (fp8_group_quant.cu), then the FP8 tensor-core
// product with both operands' block scales (cublaslt_fp8_matmul.h). Taken for more than 8 rows that
// the GEMV did not take (it takes up to 16 and streams the weight once as well; cuBLASLt 13.0 on H100 answered
// NOT_SUPPORTED for every M % 4 != 0 tried, 9, 17, 33, 130, so those run padded to M % 4 == 0), 128 x 128
// weight blocks, K % 128 == 0, N % 16 == 0, bf16/f16 x with 16-byte
// aligned rows, and when cuBLASLt has an algorithm for the shape; false (nothing launched) leaves
// the product to the dequantization path.
bool CudaBackend::fp8_w8a8_matmul(void* out, int64_t ld_out, const TensorView& x, int64_t ld_x,
                                  const cuda::QuantWeight& w, const char* op) {
  const int64_t m = x.size(0), n = w.n, k = w.k;
  // Above the GEMV's 8 rows of one mma group; products of 9..16 rows get here only where the GEMV does not
  // take them (KernelOptions::quant_gemv off, or its layout).
  if (!fp8_block_scaling_supported_ || m <= cuda::kGemvMaxRows || !kernel_options_.fp8_w8a8) return false;
  if (w.block_n != cuda::kFp8GroupCols || w.block_k != cuda::kFp8GroupCols || k % cuda::kFp8GroupCols != 0 ||
      n % 16 != 0 || (x.dtype != DType::kBF16 && x.dtype != DType::kF16) ||
      !cuda::quantize_fp8_groups_applies(x.dtype, x.data, ld_x, k)) {
    return false;
  }
  if (!fp8_matmul_) {
    CHECK_MSG(!is_capturing(), "[cuda] {}: the first W8A8 product runs inside a CUDA graph capture; run one before "
              "capturing (the engine's activation profile does)", op);
    fp8_matmul_ = std::make_unique<cuda::CublasLtFp8Matmul>(stream());
  }
  // cuBLASLt takes M % 4 == 0 only: other M run as M rounded up, over a copy of x with zero rows
  // appended (their scales come out 1, their products 0) into a scratch output whose first M rows
  // are copied back. The copies cost ~(M K + M N) x 4 bytes, small next to the weight's N K.
  const int64_t m4 = (m + 3) / 4 * 4;
  const bool padded_rows = m4 != m;
  const size_t elem = dtype_size_bytes(x.dtype);
  const size_t x_pad_bytes = padded_rows ? round_up_bytes(static_cast<size_t>(m4 * k) * elem) : 0;
  const size_t out_pad_bytes = padded_rows ? round_up_bytes(static_cast<size_t>(m4 * n) * elem) : 0;
  const int64_t groups = k / cuda::kFp8GroupCols, n_blocks = ceil_div(n, cuda::kFp8GroupCols);
  const int64_t scale_pitch = cuda::fp8_block_scales_pitch(k);
  const size_t x_fp8_bytes = round_up_bytes(static_cast<size_t>(m4 * k));
  const size_t x_scales_bytes = round_up_bytes(static_cast<size_t>(groups * m4) * sizeof(float));
  const size_t w_scales_bytes =
      scale_pitch == groups ? 0 : round_up_bytes(static_cast<size_t>(n_blocks * scale_pitch) * sizeof(float));
  // Probe cuBLASLt on the workspace's layout before growing it: supports() and run() key plans by
  // out's pitch and alignment, and every part of the workspace starts 256-byte aligned (the
  // allocation is, and each part's size is rounded up to 256), as a null pointer's alignment says.
  if (padded_rows ? !fp8_matmul_->supports(x.dtype, nullptr, n, m4, n, k)
                  : !fp8_matmul_->supports(x.dtype, out, ld_out, m, n, k))
    return false;
  char* workspace = static_cast<char*>(grow_only(w8a8_workspace_, w8a8_workspace_captures_,
                                                 x_fp8_bytes + x_scales_bytes + w_scales_bytes + x_pad_bytes +
                                                     out_pad_bytes,
                                                 op, "W8A8"));
  uint8_t* x_fp8 = reinterpret_cast<uint8_t*>(workspace);
  float* x_scales = reinterpret_cast<float*>(workspace + x_fp8_bytes);
  char* after_scales = workspace + x_fp8_bytes + x_scales_bytes;
  const float* w_scales = w.scales;
  if (w_scales_bytes > 0) {
    float* padded = reinterpret_cast<float*>(after_scales);
    CUDA_CHECK(cuda::launch_pad_block_scales(padded, scale_pitch, w.scales, n_blocks, groups, stream()));
    w_scales = padded;
  }
  const void* x_rows = x.data;
  int64_t ld_x_rows = ld_x;
  void* out_rows = out;
  int64_t ld_out_rows = ld_out;
  if (padded_rows) {
    char* x_pad = after_scales + w_scales_bytes;
    out_rows = x_pad + x_pad_bytes;
    ld_out_rows = n;
    CUDA_CHECK(cudaMemcpy2DAsync(x_pad, static_cast<size_t>(k) * elem, x.data, static_cast<size_t>(ld_x) * elem,
                                 static_cast<size_t>(k) * elem, static_cast<size_t>(m), cudaMemcpyDeviceToDevice,
                                 stream()));
    CUDA_CHECK(cudaMemsetAsync(x_pad + static_cast<size_t>(m * k) * elem, 0, static_cast<size_t>((m4 - m) * k) * elem,
                               stream()));
    x_rows = x_pad;
    ld_x_rows = k;
  }
  CUDA_CHECK(cuda::launch_quantize_fp8_groups(x.dtype, x_fp8, x_scales, x_rows, ld_x_rows, m4, k, stream()));
  fp8_matmul_->run(x.dtype, out_rows, ld_out_rows, x_fp8, x_scales, w.data, w_scales, m4, n, k);
  if (padded_rows) {
    CUDA_CHECK(cudaMemcpy2DAsync(out, static_cast<size_t>(ld_out) * elem, out_rows, static_cast<size_t>(n) * elem,
                                 static_cast<size_t>(n) * elem, static_cast<size_t>(m), cudaMemcpyDeviceToDevice,
                                 stream()));
  }
  return true;
}

void CudaBackend::quantize_fp8_groups(TensorView x_fp8, TensorView scales, const TensorView& x) {
  const char* op = "quantize_fp8_groups";
  CHECK_MSG(x.device == Device::kCuda && x.ndim() == 2 && is_float(x.dtype) && (x.strides[1] == 1 || x.size(1) == 1),
            "[cuda] {}: x must be 2-D f32/bf16/f16 on the GPU with unit column stride, got {} {}", op,
            x.shape.to_string(), dtype_name(x.dtype));
  const int64_t m = x.size(0), k = x.size(1);
  CHECK_MSG(k % cuda::kFp8GroupCols == 0, "[cuda] {}: K must be a multiple of {}, got {}", op, cuda::kFp8GroupCols, k);
  check_quant_tensor(x_fp8, DType::kF8E4M3, m, k, op, "x_fp8");
  check_quant_tensor(scales, DType::kF32, k / cuda::kFp8GroupCols, m, op, "scales");
  const int64_t ld_x = m > 1 ? x.strides[0] : k;
  CHECK_MSG(cuda::quantize_fp8_groups_applies(x.dtype, x.data, ld_x, k),
            "[cuda] {}: x must be 16-byte aligned with a row pitch of a multiple of 16 bytes", op);
  CUDA_CHECK(cuda::launch_quantize_fp8_groups(x.dtype, static_cast<uint8_t*>(x_fp8.data), scales.ptr<float>(), x.data,
                                              ld_x, m, k, stream()));
}

void CudaBackend::matmul_fp8_block(TensorView out, const TensorView& x, const TensorView& w, const TensorView& w_scale,
                                   int64_t block_n, int64_t block_k) {
  const char* op = "matmul_fp8_block";
  CHECK_MSG(w.ndim() == 2, "[cuda] {}: w must be [N, K], got {}", op, w.shape.to_string());
  CHECK_MSG(block_n > 0 && block_k > 0, "[cuda] {}: block sizes must be positive, got [{}, {}]", op, block_n, block_k);
  const int64_t n = w.size(0), k = w.size(1);
  check_quant_tensor(w, DType::kF8E4M3, n, k, op, "w");
  check_quant_tensor(w_scale, DType::kF32, ceil_div(n, block_n), ceil_div(k, block_k), op, "w_scale");
  cuda::QuantWeight q;
  q.format = cuda::QuantFormat::kFp8Block;
  q.data = w.data;
  q.scales = w_scale.ptr<float>();
  q.n = n;
  q.k = k;
  q.block_n = block_n;
  q.block_k = block_k;
  quant_matmul(out, x, q, op);
}

void CudaBackend::matmul_int4(TensorView out, const TensorView& x, const TensorView& qweight, const TensorView& scales,
                              const TensorView& zeros, int64_t group_size) {
  const char* op = "matmul_int4";
  CHECK_MSG(qweight.ndim() == 2, "[cuda] {}: qweight must be [N, K / 8], got {}", op, qweight.shape.to_string());
  const int64_t n = qweight.size(0), k = qweight.size(1) * 8;
  CHECK_MSG(group_size > 0 && group_size % 8 == 0 && k % group_size == 0,
            "[cuda] {}: group_size must be a positive multiple of 8 dividing K = {}, got {}", op, k, group_size);
  check_quant_tensor(qweight, DType::kI32, n, k / 8, op, "qweight");
  check_quant_tensor(scales, DType::kF32, n, k / group_size, op, "scales");
  check_quant_tensor(zeros, DType::kU8, n, k / group_size, op, "zeros");
  cuda::QuantWeight q;
  q.format = cuda::QuantFormat::kInt4;
  q.data = qweight.data;
  q.scales = scales.ptr<float>();
  q.zeros = static_cast<const uint8_t*>(zeros.data);
  q.n = n;
  q.k = k;
  q.block_n = 1;
  q.block_k = group_size;
  quant_matmul(out, x, q, op);
}

void CudaBackend::matmul_mxfp4(TensorView out, const TensorView& x, const TensorView& blocks, const TensorView& scales) {
  const char* op = "matmul_mxfp4";
  CHECK_MSG(blocks.ndim() == 2 && blocks.size(1) % 16 == 0, "[cuda] {}: blocks must be [N, K / 2] with K % 32 == 0, got {}",
            op, blocks.shape.to_string());
  const int64_t n = blocks.size(0), k = blocks.size(1) * 2;
  check_quant_tensor(blocks, DType::kU8, n, k / 2, op, "blocks");
  check_quant_tensor(scales, DType::kU8, n, k / kMxfp4Group, op, "scales");
  cuda::QuantWeight q;
  q.format = cuda::QuantFormat::kMxfp4;
  q.data = blocks.data;
  q.exponents = static_cast<const uint8_t*>(scales.data);
  q.n = n;
  q.k = k;
  q.block_n = 1;
  q.block_k = kMxfp4Group;
  quant_matmul(out, x, q, op);
}

void CudaBackend::rms_norm(TensorView out, const TensorView& x, const TensorView& w, float eps, NormWeight mode) {
  const cuda::Rows in = rows_of(x, "rms_norm", "x"), dst = rows_of(out, "rms_norm", "out");
  check_same_rows(in, dst, "rms_norm");
  check_dtype(out, x.dtype, "rms_norm", "out");
  check_norm_weight(w, x.dtype, in.row_size, "rms_norm");
  CUDA_CHECK(cuda::launch_rms_norm(x.dtype, dst, in, w.data, eps, cuda::norm_form(mode), stream()));
}

void CudaBackend::add(TensorView out, const TensorView& a, const TensorView& b) {
  const cuda::Rows la = rows_of(a, "add", "a"), lb = rows_of(b, "add", "b"), lo = rows_of(out, "add", "out");
  check_same_rows(la, lb, "add");
  check_same_rows(la, lo, "add");
  check_dtype(b, a.dtype, "add", "b");
  check_dtype(out, a.dtype, "add", "out");
  CUDA_CHECK(cuda::launch_add(a.dtype, lo, la, lb, stream()));
}

void CudaBackend::rope(TensorView x, const TensorView& positions, const TensorView& inv_freq,
                       float attention_scaling) {
  CHECK_MSG(x.ndim() == 3, "[cuda] rope: x must be [T, heads, head_dim], got {}", x.shape.to_string());
  const cuda::Rows rows = rows_of(x, "rope", "x");
  const int64_t half = inv_freq.numel();
  CHECK_MSG(2 * half <= x.size(2), "[cuda] rope: inv_freq{} for head_dim {}", inv_freq.shape.to_string(), x.size(2));
  check_index_vector(positions, DType::kI32, x.size(0), "rope", "positions");
  check_index_vector(inv_freq, DType::kF32, half, "rope", "inv_freq");
  CUDA_CHECK(cuda::launch_rope(x.dtype, rows, x.size(1), positions.ptr<int32_t>(), inv_freq.ptr<float>(), half,
                               attention_scaling, stream()));
}

void CudaBackend::act_mul(TensorView out, const TensorView& gate_up, Activation act) {
  const cuda::Rows in = rows_of(gate_up, "act_mul", "gate_up"), dst = rows_of(out, "act_mul", "out");
  CHECK_MSG(in.row_size == 2 * dst.row_size && in.num_rows == dst.num_rows, "[cuda] act_mul gate_up{} out{}",
            gate_up.shape.to_string(), out.shape.to_string());
  check_dtype(out, gate_up.dtype, "act_mul", "out");
  CUDA_CHECK(cuda::launch_act_mul(out.dtype, dst, in, act, stream()));
}

void CudaBackend::add_bias(TensorView x, const TensorView& bias) {
  const cuda::Rows rows = rows_of(x, "add_bias", "x");
  check_bias(bias, x.dtype, rows.row_size, "add_bias");
  CUDA_CHECK(cuda::launch_add_bias(x.dtype, rows, bias.data, stream()));
}

void CudaBackend::scale(TensorView out, const TensorView& x, float s) {
  const cuda::Rows in = rows_of(x, "scale", "x"), dst = rows_of(out, "scale", "out");
  CHECK_MSG(in.row_size == dst.row_size && in.num_rows == dst.num_rows, "[cuda] scale x{} out{}",
            x.shape.to_string(), out.shape.to_string());
  check_dtype(out, x.dtype, "scale", "out");
  CUDA_CHECK(cuda::launch_scale(x.dtype, dst, in, s, stream()));
}

void CudaBackend::softcap(TensorView x, float cap) {
  CUDA_CHECK(cuda::launch_softcap(x.dtype, rows_of(x, "softcap", "x"), cap, stream()));
}

void CudaBackend::embedding(TensorView out, const TensorView& table, const TensorView& ids) {
  CHECK_MSG(table.ndim() == 2, "[cuda] embedding: table must be 2-D, got {}", table.shape.to_string());
  const cuda::Rows src = rows_of(table, "embedding", "table"), dst = rows_of(out, "embedding", "out");
  CHECK_MSG(dst.row_size == src.row_size, "[cuda] embedding: out rows of {} for a table of {}", dst.row_size,
            src.row_size);
  check_index_vector(ids, DType::kI32, dst.num_rows, "embedding", "ids");
  check_dtype(out, table.dtype, "embedding", "out");
  CUDA_CHECK(cuda::launch_embedding(out.dtype, dst, src, ids.ptr<int32_t>(), stream()));
}

void CudaBackend::write_kv(TensorView k_cache, TensorView v_cache, const TensorView& k, const TensorView& v,
                           const TensorView& slot_mapping, const KvScales& scales) {
  const cuda::CacheLayout layout = cache_layout(k_cache, "write_kv", "k_cache");
  const cuda::CacheLayout v_layout = cache_layout(v_cache, "write_kv", "v_cache");
  CHECK_MSG(k_cache.shape == v_cache.shape && k.shape == v.shape && k.ndim() == 3 &&
                layout.stride_block == v_layout.stride_block && layout.stride_slot == v_layout.stride_slot &&
                layout.stride_head == v_layout.stride_head,
            "[cuda] write_kv: caches {} {} rows {} {}", k_cache.shape.to_string(), v_cache.shape.to_string(),
            k.shape.to_string(), v.shape.to_string());
  CHECK_MSG(k.size(1) == layout.num_kv_heads && k.size(2) == layout.head_dim, "[cuda] write_kv: rows {} do not fit cache {}",
            k.shape.to_string(), k_cache.shape.to_string());
  check_dtype(v, k.dtype, "write_kv", "v");
  CHECK_MSG(is_float(k.dtype), "[cuda] write_kv: rows dtype {}", dtype_name(k.dtype));
  const cuda::KvFormat format = kv_format(k_cache, v_cache, k.dtype, scales, "write_kv");
  const int64_t num_tokens = k.size(0);
  check_index_vector(slot_mapping, DType::kI64, num_tokens, "write_kv", "slot_mapping");
  CUDA_CHECK(cuda::launch_write_kv(k.dtype, format, k_cache.data, v_cache.data, layout, rows_of(k, "write_kv", "k"),
                                   rows_of(v, "write_kv", "v"), slot_mapping.ptr<int64_t>(), num_tokens, stream()));
}

void CudaBackend::attention(TensorView out, const TensorView& q, const TensorView& k_cache, const TensorView& v_cache,
                            const AttentionParams& params) {
  const char* op = "attention";
  CHECK_MSG(q.ndim() == 3 && q.shape == out.shape && q.strides[2] == 1 && out.strides[2] == 1,
            "[cuda] attention: q {} and out {} must be [T, heads, head_dim] with contiguous head_dim",
            q.shape.to_string(), out.shape.to_string());
  CHECK_MSG(q.device == Device::kCuda && out.device == Device::kCuda, "[cuda] attention: q and out must be on the GPU");
  cuda::AttentionArgs a;
  a.k_layout = cache_layout(k_cache, op, "k_cache");
  a.v_layout = cache_layout(v_cache, op, "v_cache");
  CHECK_MSG(k_cache.shape == v_cache.shape, "[cuda] attention: k_cache {} != v_cache {}", k_cache.shape.to_string(),
            v_cache.shape.to_string());
  a.kv_format = kv_format(k_cache, v_cache, q.dtype, params.kv_scales, op);
  CHECK_MSG(is_float(q.dtype) && is_float(out.dtype), "[cuda] attention: q {} out {}", dtype_name(q.dtype),
            dtype_name(out.dtype));
  const int64_t head_dim = q.size(2);
  CHECK_MSG(a.k_layout.head_dim == head_dim && head_dim <= 256, "[cuda] attention: head_dim of q {} vs cache {} (at most 256)",
            head_dim, a.k_layout.head_dim);
  a.num_heads = q.size(1);
  CHECK_MSG(a.k_layout.num_kv_heads > 0 && a.num_heads % a.k_layout.num_kv_heads == 0,
            "[cuda] attention: {} query heads do not share {} kv heads evenly", a.num_heads, a.k_layout.num_kv_heads);
  const TensorView& tables = params.block_tables;
  a.num_seqs = params.seq_lens_k.numel();
  check_index_vector(params.cu_seqlens_q, DType::kI32, a.num_seqs + 1, op, "cu_seqlens_q");
  check_index_vector(params.seq_lens_k, DType::kI32, a.num_seqs, op, "seq_lens_k");
  CHECK_MSG(tables.device == Device::kCuda && tables.dtype == DType::kI32 && tables.ndim() == 2 &&
                tables.size(0) == a.num_seqs && tables.strides[1] == 1,
            "[cuda] attention: block_tables must be [{}, max_blocks] i32 on the GPU, got {}", a.num_seqs,
            tables.shape.to_string());
  a.q = q.data;
  a.q_stride_row = q.strides[0];
  a.q_stride_head = q.strides[1];
  a.out = out.data;
  a.out_dtype = out.dtype;
  a.out_stride_row = out.strides[0];
  a.out_stride_head = out.strides[1];
  a.k_cache = k_cache.data;
  a.v_cache = v_cache.data;
  a.cu_seqlens_q = params.cu_seqlens_q.ptr<int32_t>();
  a.seq_lens_k = params.seq_lens_k.ptr<int32_t>();
  a.block_tables = tables.ptr<int32_t>();
  a.block_table_stride = tables.strides[0];
  a.num_tokens = q.size(0);
  a.scale = params.scale;
  a.softcap = params.softcap;
  a.causal = params.causal;
  a.window = params.sliding_window > 0 ? params.sliding_window : 0;
  if (params.sinks.data != nullptr) {
    CHECK_MSG(params.sinks.dtype == DType::kF32 && params.sinks.numel() == q.size(1) &&
                  params.sinks.device == Device::kCuda,
              "[attention] sinks must be [{}] f32 on the GPU", q.size(1));
    a.sinks = params.sinks.ptr<float>();
  }
  if (a.num_seqs == 0 || a.num_tokens == 0) return;

  // The plan (split counts, which kernels) depends on shapes and hints only. The longest context
  // is bounded by the block table's width (and by the max_seqlen_k hint when given).
  int64_t max_keys = tables.size(1) * a.k_layout.block_size;
  if (params.max_seqlen_k > 0) max_keys = std::min<int64_t>(max_keys, params.max_seqlen_k);
  const cuda::AttentionPlan plan = cuda::plan_attention(q.dtype, a, max_keys, params.max_seqlen_q, num_sms_,
                                                              kernel_options_, params.short_rows_split_keys);
  float* partials = nullptr;
  if (plan.partial_floats > 0) {
    const int64_t floats = plan.partial_floats;
    if (!attention_partials_.defined() || attention_partials_.numel() < floats) {
      if (attention_partials_.defined()) retired_.push_back(std::move(attention_partials_));
      attention_partials_ = alloc({std::max<int64_t>(floats, int64_t{1} << 20)}, DType::kF32);
    }
    partials = attention_partials_.ptr<float>();
  }
  CUDA_CHECK(cuda::launch_attention(q.dtype, a, plan, partials, stream()));
}

void CudaBackend::argmax(TensorView ids, const TensorView& logits) {
  const cuda::Rows rows = rows_of(logits, "argmax", "logits");
  check_index_vector(ids, DType::kI32, rows.num_rows, "argmax", "ids");
  CHECK_MSG(is_float(logits.dtype), "[cuda] argmax: logits dtype {}", dtype_name(logits.dtype));
  const int64_t entries = rows.num_rows * cuda::kArgmaxScratchPerRow;
  if (!argmax_scratch_.defined() || argmax_scratch_.numel() < entries) {
    if (argmax_scratch_.defined()) {
      retired_.push_back(std::move(argmax_scratch_));
      retired_.push_back(std::move(argmax_values_));
    }
    argmax_scratch_ = alloc({std::max<int64_t>(entries, 256 * cuda::kArgmaxScratchPerRow)}, DType::kI64);
    argmax_values_ = alloc({argmax_scratch_.numel()}, DType::kF32);
  }
  CUDA_CHECK(cuda::launch_argmax(logits.dtype, ids.ptr<int32_t>(), rows, argmax_values_.ptr<float>(),
                                 argmax_scratch_.ptr<int64_t>(), stream()));
}

void CudaBackend::log_softmax(TensorView out, const TensorView& logits) {
  const cuda::Rows in = rows_of(logits, "log_softmax", "logits"), dst = rows_of(out, "log_softmax", "out");
  check_same_rows(in, dst, "log_softmax");
  check_dtype(out, DType::kF32, "log_softmax", "out");
  CHECK_MSG(is_float(logits.dtype), "[cuda] log_softmax: logits dtype {}", dtype_name(logits.dtype));
  CUDA_CHECK(cuda::launch_log_softmax(logits.dtype, dst, in, stream()));
}

void CudaBackend::sample(TensorView ids, const TensorView& logits, const TensorView& params) {
  const cuda::Rows rows = rows_of(logits, "sample", "logits");
  check_index_vector(ids, DType::kI32, rows.num_rows, "sample", "ids");
  CHECK_MSG(is_float(logits.dtype), "[cuda] sample: logits dtype {}", dtype_name(logits.dtype));
  CHECK_MSG(params.device == Device::kCuda && params.dtype == DType::kU8 && params.is_contiguous() &&
                params.nbytes() == static_cast<size_t>(rows.num_rows) * sizeof(sampling::RowParams) &&
                reinterpret_cast<uintptr_t>(params.data) % alignof(sampling::RowParams) == 0,
            "[cuda] sample: params must be [{}, {}] u8 (RowParams) on the GPU, 8-byte aligned, got {}", rows.num_rows,
            sizeof(sampling::RowParams), params.shape.to_string());
  CUDA_CHECK(cuda::launch_sample(logits.dtype, ids.ptr<int32_t>(), rows,
                                 static_cast<const sampling::RowParams*>(params.data), stream()));
}

// A raw-bytes parameter tensor of `Row` structs on the GPU; returns the number of rows.
template <typename Row>
int64_t param_rows(const TensorView& rows, const char* op) {
  CHECK_MSG(rows.device == Device::kCuda && rows.dtype == DType::kU8 && rows.is_contiguous() &&
                rows.nbytes() % sizeof(Row) == 0 && reinterpret_cast<uintptr_t>(rows.data) % alignof(Row) == 0,
            "[cuda] {}: rows must be [n, {}] u8 on the GPU, {}-byte aligned, got {}", op, sizeof(Row), alignof(Row),
            rows.shape.to_string());
  return static_cast<int64_t>(rows.nbytes() / sizeof(Row));
}

void CudaBackend::apply_penalties(TensorView out, const TensorView& logits, const TensorView& rows,
                                  const TensorView& history) {
  const cuda::Rows in = rows_of(logits, "apply_penalties", "logits");
  CHECK_MSG(is_float(logits.dtype), "[cuda] apply_penalties: logits dtype {}", dtype_name(logits.dtype));
  const int64_t num_rows = param_rows<sampling::PenaltyRow>(rows, "apply_penalties");
  const int64_t vocab = in.row_size;
  CHECK_MSG(out.device == Device::kCuda && out.dtype == DType::kF32 && out.is_contiguous() && out.ndim() == 2 &&
                out.size(0) == num_rows && out.size(1) == vocab,
            "[cuda] apply_penalties: out must be a contiguous [{}, {}] f32 tensor on the GPU, got {} {}", num_rows,
            vocab, out.shape.to_string(), dtype_name(out.dtype));
  CHECK_MSG(history.device == Device::kCuda && history.dtype == DType::kI32 && history.is_contiguous(),
            "[cuda] apply_penalties: history must be a contiguous [H] i32 tensor on the GPU");
  if (num_rows == 0) return;
  const int64_t words = num_rows * vocab;
  if (!penalty_words_.defined() || penalty_words_.numel() < words) {
    // alloc() zero-fills, which is the state every call leaves behind. The old words are freed in
    // stream order, after the work already queued on them.
    penalty_words_ = alloc({std::max<int64_t>(words, 4 * vocab)}, DType::kI32);
  }
  // Each row's history lies inside [H]; the longest row is at most H (a grid size only: the kernels
  // loop over their row's own length, read on the device).
  CUDA_CHECK(cuda::launch_apply_penalties(logits.dtype, out.ptr<float>(), in,
                                          static_cast<const sampling::PenaltyRow*>(rows.data), num_rows,
                                          history.numel() > 0 ? history.ptr<const int32_t>() : nullptr,
                                          history.numel(), static_cast<uint32_t*>(penalty_words_.view().data),
                                          stream()));
}

void CudaBackend::apply_token_bitmask(TensorView logits, const TensorView& bitmask, const TensorView& rows) {
  const cuda::Rows in = rows_of(logits, "apply_token_bitmask", "logits");
  CHECK_MSG(is_float(logits.dtype), "[cuda] apply_token_bitmask: logits dtype {}", dtype_name(logits.dtype));
  const int64_t n = rows.numel(), words = (in.row_size + 31) / 32;
  CHECK_MSG(rows.device == Device::kCuda && rows.dtype == DType::kI32 && rows.is_contiguous() &&
                bitmask.device == Device::kCuda && bitmask.dtype == DType::kI32 && bitmask.is_contiguous() &&
                bitmask.numel() == n * words,
            "[cuda] apply_token_bitmask: bitmask must be [{}, {}] i32 and rows [{}] i32 on the GPU", n, words, n);
  CUDA_CHECK(cuda::launch_apply_token_bitmask(logits.dtype, in, static_cast<const uint32_t*>(bitmask.data),
                                              rows.ptr<const int32_t>(), n, stream()));
}

void CudaBackend::add_logit_bias(TensorView logits, const TensorView& entries) {
  const cuda::Rows in = rows_of(logits, "add_logit_bias", "logits");
  CHECK_MSG(is_float(logits.dtype), "[cuda] add_logit_bias: logits dtype {}", dtype_name(logits.dtype));
  CHECK_MSG(entries.device == Device::kCuda && entries.dtype == DType::kI32 && entries.is_contiguous() &&
                entries.numel() % 3 == 0,
            "[cuda] add_logit_bias: entries must be [K, 3] i32 on the GPU");
  CUDA_CHECK(cuda::launch_add_logit_bias(logits.dtype, in, entries.ptr<const int32_t>(), entries.numel() / 3, stream()));
}

void CudaBackend::logprobs(TensorView out_ids, TensorView out_logprobs, const TensorView& logits,
                           const TensorView& ids, const TensorView& rows) {
  const cuda::Rows in = rows_of(logits, "logprobs", "logits");
  CHECK_MSG(is_float(logits.dtype), "[cuda] logprobs: logits dtype {}", dtype_name(logits.dtype));
  const int64_t num_rows = param_rows<sampling::LogprobRow>(rows, "logprobs");
  CHECK_MSG(out_ids.device == Device::kCuda && out_ids.dtype == DType::kI32 && out_ids.is_contiguous() &&
                out_ids.ndim() == 2 && out_ids.size(0) == num_rows && out_ids.size(1) >= 1 &&
                out_ids.size(1) <= 1 + sampling::kMaxTopLogprobs,
            "[cuda] logprobs: out_ids must be a contiguous [{}, 1 + K <= {}] i32 tensor on the GPU, got {}", num_rows,
            1 + sampling::kMaxTopLogprobs, out_ids.shape.to_string());
  CHECK_MSG(out_logprobs.device == Device::kCuda && out_logprobs.dtype == DType::kF32 &&
                out_logprobs.is_contiguous() && out_logprobs.shape == out_ids.shape,
            "[cuda] logprobs: out_logprobs must be a contiguous {} f32 tensor on the GPU", out_ids.shape.to_string());
  CHECK_MSG(ids.device == Device::kCuda && ids.dtype == DType::kI32 && ids.is_contiguous(),
            "[cuda] logprobs: ids must be a contiguous [N] i32 tensor on the GPU");
  CUDA_CHECK(cuda::launch_logprobs(logits.dtype, out_ids.ptr<int32_t>(), out_logprobs.ptr<float>(), out_ids.size(1),
                                   in, ids.ptr<const int32_t>(), static_cast<const sampling::LogprobRow*>(rows.data),
                                   num_rows, stream()));
}

void CudaBackend::add_rms_norm(TensorView hidden, TensorView normed, const TensorView& delta, const TensorView& w,
                               float eps, NormWeight mode) {
  const cuda::Rows h = rows_of(hidden, "add_rms_norm", "hidden"), n = rows_of(normed, "add_rms_norm", "normed"),
                   d = rows_of(delta, "add_rms_norm", "delta");
  check_add_norm_views(h, n, d, hidden, normed, delta, w, "add_rms_norm");
  CUDA_CHECK(cuda::launch_add_rms_norm(hidden.dtype, h, n, d, w.data, eps, cuda::norm_form(mode), stream()));
}

void CudaBackend::add_gather_rms_norm(TensorView last, TensorView hidden, const TensorView& delta,
                                      const TensorView& rows, const TensorView& w, float eps, NormWeight mode) {
  const char* op = "add_gather_rms_norm";
  const cuda::Rows out = rows_of(last, op, "last"), h = rows_of(hidden, op, "hidden"), d = rows_of(delta, op, "delta");
  check_same_rows(h, d, op);
  CHECK_MSG(out.row_size == h.row_size, "[cuda] {}: last rows of {} for hidden rows of {}", op, out.row_size,
            h.row_size);
  check_dtype(last, hidden.dtype, op, "last");
  check_dtype(delta, hidden.dtype, op, "delta");
  check_norm_weight(w, hidden.dtype, h.row_size, op);
  check_index_vector(rows, DType::kI32, out.num_rows, op, "rows");
  CUDA_CHECK(cuda::launch_add_gather_rms_norm(hidden.dtype, out, h, d, rows.ptr<int32_t>(), w.data, eps,
                                              cuda::norm_form(mode), stream()));
}

void CudaBackend::qk_norm_rope_write_kv(TensorView q, TensorView k, const TensorView& v, const TensorView& q_norm,
                                        const TensorView& k_norm, float eps, NormWeight mode,
                                        const TensorView& positions, const TensorView& inv_freq,
                                        float attention_scaling, TensorView k_cache, TensorView v_cache,
                                        const TensorView& slot_mapping, const KvScales& scales) {
  const char* op = "qk_norm_rope_write_kv";
  CHECK_MSG(q.ndim() == 3 && k.ndim() == 3 && k.shape == v.shape && q.size(0) == k.size(0) && q.size(2) == k.size(2),
            "[cuda] {}: q {} k {} v {} must be [T, heads, head_dim]", op, q.shape.to_string(), k.shape.to_string(),
            v.shape.to_string());
  cuda::QkPrologueArgs a;
  a.q = rows_of(q, op, "q");
  a.k = rows_of(k, op, "k");
  a.v = rows_of(v, op, "v");
  a.num_tokens = q.size(0);
  a.num_q_heads = q.size(1);
  a.num_kv_heads = k.size(1);
  a.head_dim = q.size(2);
  CHECK_MSG(a.head_dim <= cuda::kMaxPrologueHeadDim, "[cuda] {}: head_dim {} > {}", op, a.head_dim,
            cuda::kMaxPrologueHeadDim);
  for (const TensorView* t : std::initializer_list<const TensorView*>{&k, &v})
    check_dtype(*t, q.dtype, op, "operand");
  a.kv_format = kv_format(k_cache, v_cache, q.dtype, scales, op);
  if (q_norm.data != nullptr) {  // else a model without q/k norms
    check_dtype(q_norm, q.dtype, op, "q_norm");
    check_dtype(k_norm, q.dtype, op, "k_norm");
    CHECK_MSG(q_norm.device == Device::kCuda && k_norm.device == Device::kCuda && q_norm.numel() == a.head_dim &&
                  k_norm.numel() == a.head_dim && q_norm.is_contiguous() && k_norm.is_contiguous(),
              "[cuda] {}: q_norm{} k_norm{} for head_dim {}", op, q_norm.shape.to_string(), k_norm.shape.to_string(),
              a.head_dim);
    a.q_norm = q_norm.data;
    a.k_norm = k_norm.data;
  }
  a.eps = eps;
  a.norm_form = cuda::norm_form(mode);
  a.half = inv_freq.numel();
  CHECK_MSG(2 * a.half <= a.head_dim, "[cuda] {}: inv_freq{} for head_dim {}", op, inv_freq.shape.to_string(), a.head_dim);
  check_index_vector(positions, DType::kI32, a.num_tokens, op, "positions");
  check_index_vector(inv_freq, DType::kF32, a.half, op, "inv_freq");
  a.positions = positions.ptr<int32_t>();
  a.inv_freq = inv_freq.ptr<float>();
  a.attention_scaling = attention_scaling;
  a.cache = cache_layout(k_cache, op, "k_cache");
  const cuda::CacheLayout v_layout = cache_layout(v_cache, op, "v_cache");
  CHECK_MSG(k_cache.shape == v_cache.shape && a.cache.stride_block == v_layout.stride_block &&
                a.cache.stride_slot == v_layout.stride_slot && a.cache.stride_head == v_layout.stride_head &&
                a.cache.num_kv_heads == a.num_kv_heads && a.cache.head_dim == a.head_dim,
            "[cuda] {}: caches {} {} for k {}", op, k_cache.shape.to_string(), v_cache.shape.to_string(),
            k.shape.to_string());
  check_index_vector(slot_mapping, DType::kI64, a.num_tokens, op, "slot_mapping");
  a.k_cache = k_cache.data;
  a.v_cache = v_cache.data;
  a.slot_mapping = slot_mapping.ptr<int64_t>();
  CUDA_CHECK(cuda::launch_qk_norm_rope_write_kv(q.dtype, a, stream()));
}

// ----- hybrid models ---------------------------------------------------------------------------

cuda::GdnSeqs gdn_seqs(const GdnParams& params, int64_t num_slots, const char* op) {
  cuda::GdnSeqs seqs;
  seqs.num_seqs = params.state_slots.numel();
  check_index_vector(params.cu_seqlens_q, DType::kI32, seqs.num_seqs + 1, op, "cu_seqlens_q");
  check_index_vector(params.state_slots, DType::kI32, seqs.num_seqs, op, "state_slots");
  seqs.cu_seqlens_q = params.cu_seqlens_q.ptr<int32_t>();
  seqs.state_slots = params.state_slots.ptr<int32_t>();
  seqs.num_slots = num_slots;
  if (params.checkpoint_slots.data != nullptr) {
    check_index_vector(params.checkpoint_slots, DType::kI32, params.checkpoint_slots.numel(), op, "checkpoint_slots");
    seqs.checkpoint_slots = params.checkpoint_slots.ptr<int32_t>();
  }
  return seqs;
}

void CudaBackend::gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                             const GdnParams& params) {
  const char* op = "gdn_conv1d";
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && weight.ndim() == 2 && conv_state.ndim() == 3 &&
                conv_state.is_contiguous() && weight.is_contiguous(),
            "[cuda] {}: x{} weight{} conv_state{} out{}", op, x.shape.to_string(), weight.shape.to_string(),
            conv_state.shape.to_string(), out.shape.to_string());
  const int64_t channels = x.size(1), kernel = weight.size(1);
  CHECK_MSG(weight.size(0) == channels && out.shape == x.shape && conv_state.size(1) == channels &&
                conv_state.size(2) == kernel - 1 && kernel >= 2 && kernel <= cuda::kMaxGdnConvKernel,
            "[cuda] {}: x{} weight{} conv_state{} out{} (kernel 2..{})", op, x.shape.to_string(),
            weight.shape.to_string(), conv_state.shape.to_string(), out.shape.to_string(), cuda::kMaxGdnConvKernel);
  check_dtype(out, x.dtype, op, "out");
  check_dtype(weight, x.dtype, op, "weight");
  check_dtype(conv_state, x.dtype, op, "conv_state");
  CHECK_MSG(is_float(x.dtype) && conv_state.device == Device::kCuda && weight.device == Device::kCuda,
            "[cuda] {}: float operands on the GPU", op);
  CHECK_MSG(out.data != x.data, "[cuda] {}: out must not alias x", op);
  const cuda::GdnSeqs seqs = gdn_seqs(params, conv_state.size(0), op);
  CUDA_CHECK(cuda::launch_gdn_conv1d(x.dtype, rows_of(out, op, "out"), rows_of(x, op, "x"), weight.data,
                                     conv_state.data, seqs, channels, kernel, stream()));
}

void CudaBackend::gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                                 const TensorView& a, const TensorView& b, const TensorView& A_log,
                                 const TensorView& dt_bias, TensorView state, const GdnParams& params) {
  const char* op = "gdn_delta_rule";
  const bool ok = q.ndim() == 3 && k.shape == q.shape && v.ndim() == 3 && out.shape == v.shape &&
                  v.size(0) == q.size(0) && a.ndim() == 2 && b.ndim() == 2 && a.size(0) == q.size(0) &&
                  b.size(0) == q.size(0) && a.size(1) == v.size(1) && b.size(1) == v.size(1) &&
                  state.ndim() == 4 && state.dtype == DType::kF32 && state.is_contiguous() &&
                  state.size(1) == v.size(1) && state.size(2) == q.size(2) && state.size(3) == v.size(2) &&
                  q.size(1) > 0 && v.size(1) % q.size(1) == 0 && q.size(2) <= cuda::kMaxGdnHeadDim;
  CHECK_MSG(ok, "[cuda] {}: q{} k{} v{} a{} b{} state{} out{} (dk at most {})", op, q.shape.to_string(),
            k.shape.to_string(), v.shape.to_string(), a.shape.to_string(), b.shape.to_string(),
            state.shape.to_string(), out.shape.to_string(), cuda::kMaxGdnHeadDim);
  for (const TensorView* t : std::initializer_list<const TensorView*>{&k, &v, &a, &b, &out})
    check_dtype(*t, q.dtype, op, "operand");
  CHECK_MSG(is_float(q.dtype) && state.device == Device::kCuda, "[cuda] {}: float operands, state on the GPU", op);
  const int64_t hv = v.size(1);
  check_index_vector(A_log, DType::kF32, hv, op, "A_log");
  check_index_vector(dt_bias, DType::kF32, hv, op, "dt_bias");
  cuda::GdnDeltaArgs args;
  args.q = rows_of(q, op, "q");
  args.k = rows_of(k, op, "k");
  args.v = rows_of(v, op, "v");
  args.a = rows_of(a, op, "a");
  args.b = rows_of(b, op, "b");
  args.out = rows_of(out, op, "out");
  args.a_log = A_log.ptr<float>();
  args.dt_bias = dt_bias.ptr<float>();
  args.state = state.ptr<float>();
  args.seqs = gdn_seqs(params, state.size(0), op);
  args.num_k_heads = q.size(1);
  args.num_v_heads = hv;
  args.dk = q.size(2);
  args.dv = v.size(2);
  args.q_scale = 1.0f / std::sqrt(static_cast<float>(args.dk));
  args.form = params.algo == GdnAlgo::kRecurrent ? cuda::GdnDeltaForm::kRecurrent
              : params.algo == GdnAlgo::kChunked ? cuda::GdnDeltaForm::kChunked
                                                 : cuda::GdnDeltaForm::kAuto;
  args.max_seqlen_q = params.max_seqlen_q;
  args.auto_chunked_min_tokens = kernel_options_.gdn_chunked ? kernel_options_.gdn_chunked_min_tokens : INT64_MAX;
  const int64_t scratch_floats = cuda::gdn_chunk_scratch_floats(args);
  if (scratch_floats > 0) {
    args.chunk_scratch = static_cast<float*>(grow_only(gdn_chunk_scratch_, gdn_chunk_scratch_captures_,
                                                       static_cast<size_t>(scratch_floats) * sizeof(float), op,
                                                       "chunked delta rule"));
    args.chunk_scratch_floats = gdn_chunk_scratch_.nbytes() / static_cast<int64_t>(sizeof(float));
  }
  CUDA_CHECK(cuda::launch_gdn_delta_rule(q.dtype, args, stream()));
}

void CudaBackend::gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w,
                                 float eps) {
  const char* op = "gated_rms_norm";
  const cuda::Rows in = rows_of(x, op, "x"), gate = rows_of(z, op, "z"), dst = rows_of(out, op, "out");
  check_same_rows(in, gate, op);
  check_same_rows(in, dst, op);
  check_dtype(z, x.dtype, op, "z");
  check_dtype(out, x.dtype, op, "out");
  check_dtype(w, x.dtype, op, "w");
  CHECK_MSG(is_float(x.dtype) && w.device == Device::kCuda && w.numel() == in.row_size && w.is_contiguous(),
            "[cuda] {}: w{} does not match rows of {}", op, w.shape.to_string(), in.row_size);
  CUDA_CHECK(cuda::launch_gated_rms_norm(x.dtype, dst, in, gate, w.data, eps, stream()));
}

void CudaBackend::sigmoid_mul(TensorView out, const TensorView& x, const TensorView& gate) {
  const char* op = "sigmoid_mul";
  const cuda::Rows in = rows_of(x, op, "x"), g = rows_of(gate, op, "gate"), dst = rows_of(out, op, "out");
  check_same_rows(in, dst, op);
  CHECK_MSG(g.num_rows == in.num_rows && (g.row_size == in.row_size || g.row_size == 1),
            "[cuda] {}: x{} gate{}", op, x.shape.to_string(), gate.shape.to_string());
  check_dtype(gate, x.dtype, op, "gate");
  check_dtype(out, x.dtype, op, "out");
  CHECK_MSG(is_float(x.dtype), "[cuda] {}: dtype {}", op, dtype_name(x.dtype));
  CUDA_CHECK(cuda::launch_sigmoid_mul(x.dtype, dst, in, g, stream()));
}

void CudaBackend::add_rows_scaled(TensorView out, const TensorView& x, const TensorView& row_ids,
                                  const TensorView& weights) {
  const char* op = "add_rows_scaled";
  const cuda::Rows in = rows_of(x, op, "x"), dst = rows_of(out, op, "out");
  CHECK_MSG(dst.row_size == in.row_size, "[cuda] {}: x{} out{}", op, x.shape.to_string(), out.shape.to_string());
  check_index_vector(row_ids, DType::kI32, in.num_rows, op, "row_ids");
  check_index_vector(weights, DType::kF32, in.num_rows, op, "weights");
  check_dtype(out, x.dtype, op, "out");
  CHECK_MSG(is_float(x.dtype), "[cuda] {}: dtype {}", op, dtype_name(x.dtype));
  CUDA_CHECK(cuda::launch_add_rows_scaled(x.dtype, dst, in, row_ids.ptr<int32_t>(), weights.ptr<float>(), stream()));
}

void CudaBackend::moe_route(TensorView topk_ids, TensorView topk_weights, const TensorView& logits,
                            MoeRouting routing, bool renormalize) {
  const cuda::Rows rows = check_route_views(topk_ids, topk_weights, logits, "moe_route");
  CUDA_CHECK(cuda::launch_moe_route(logits.dtype, topk_ids.ptr<int32_t>(), topk_weights.ptr<float>(), rows,
                                    topk_ids.size(1), routing, renormalize, stream()));
}

void CudaBackend::moe_group(TensorView tile_pairs, TensorView tile_experts, const TensorView& topk_ids,
                            int64_t num_experts) {
  check_index_vector(topk_ids, DType::kI32, topk_ids.numel(), "moe_group", "topk_ids");
  check_group_views(tile_pairs, tile_experts, topk_ids.numel(), num_experts, "moe_group");
  CUDA_CHECK(cuda::launch_moe_group(tile_pairs.ptr<int32_t>(), tile_experts.ptr<int32_t>(), tile_experts.numel(),
                                    topk_ids.ptr<int32_t>(), topk_ids.numel(), num_experts, stream()));
}

void CudaBackend::moe_route_group(TensorView topk_ids, TensorView topk_weights, TensorView tile_pairs,
                                  TensorView tile_experts, const TensorView& logits, MoeRouting routing,
                                  bool renormalize) {
  const char* op = "moe_route_group";
  const cuda::Rows rows = check_route_views(topk_ids, topk_weights, logits, op);
  if (!cuda::moe_route_group_fits(rows.num_rows, rows.row_size, topk_ids.size(1))) {
    Backend::moe_route_group(topk_ids, topk_weights, tile_pairs, tile_experts, logits, routing, renormalize);
    return;
  }
  check_group_views(tile_pairs, tile_experts, topk_ids.numel(), rows.row_size, op);
  CUDA_CHECK(cuda::launch_moe_route_group(logits.dtype, topk_ids.ptr<int32_t>(), topk_weights.ptr<float>(),
                                          tile_pairs.ptr<int32_t>(), tile_experts.ptr<int32_t>(), tile_experts.numel(),
                                          rows, topk_ids.size(1), routing, renormalize, stream()));
}

void CudaBackend::moe_expert_gemm(TensorView out, const TensorView& x, const MoeExpertWeights& w,
                                  const TensorView& tile_pairs, const TensorView& tile_experts,
                                  int64_t pairs_per_x_row, std::optional<Activation> act) {
  const char* op = "moe_expert_gemm";
  const cuda::Rows in = rows_of(x, op, "x"), dst = rows_of(out, op, "out");
  CHECK_MSG(x.ndim() == 2 && out.ndim() == 2 && w.weight.ndim() == 3 && w.weight.is_contiguous() &&
                w.weight.device == Device::kCuda && pairs_per_x_row >= 1,
            "[cuda] {}: out{} x{} weight{}", op, out.shape.to_string(), x.shape.to_string(), w.weight.shape.to_string());
  const int64_t num_experts = w.weight.size(0), n = w.weight.size(1), k = in.row_size;
  check_dtype(out, x.dtype, op, "out");
  CHECK_MSG(is_float(x.dtype) && (!w.mxfp4() || k % kMxfp4Group == 0) && dst.row_size == (act ? n / 2 : n) &&
                (!act || n % 2 == 0),
            "[cuda] {}: out{} x{} weight{}", op, out.shape.to_string(), x.shape.to_string(),
            w.weight.shape.to_string());
  if (w.mxfp4()) {
    check_quant_tensor(w.weight.reshape({num_experts * n, k / 2}), DType::kU8, num_experts * n, k / 2, op, "blocks");
    check_quant_tensor(w.scales.reshape({num_experts * n, k / 32}), DType::kU8, num_experts * n, k / 32, op, "scales");
  } else {
    check_dtype(w.weight, x.dtype, op, "weight");
    CHECK_MSG(w.weight.size(2) == k, "[cuda] {}: weight{} for x{}", op, w.weight.shape.to_string(), x.shape.to_string());
  }
  if (w.bias.data != nullptr) {
    check_dtype(w.bias, x.dtype, op, "bias");
    check_index_vector(w.bias, x.dtype, num_experts * n, op, "bias");
  }
  const int64_t num_tiles = tile_experts.numel();
  check_index_vector(tile_experts, DType::kI32, num_tiles, op, "tile_experts");
  check_index_vector(tile_pairs, DType::kI32, num_tiles * kMoeTileRows, op, "tile_pairs");
  cuda::MoeGemmArgs args;
  args.out = out.data;
  args.ld_out = dst.outer_stride;
  args.x = x.data;
  args.ld_x = in.outer_stride;
  args.weight = w.weight.data;
  args.scales = w.mxfp4() ? static_cast<const uint8_t*>(w.scales.data) : nullptr;
  args.bias = w.bias.data;
  args.tile_pairs = tile_pairs.ptr<int32_t>();
  args.tile_experts = tile_experts.ptr<int32_t>();
  args.num_tiles = num_tiles;
  args.num_pairs = out.size(0);
  args.n = n;
  args.k = k;
  args.pairs_per_x_row = pairs_per_x_row;
  args.num_experts = static_cast<int>(num_experts);
  args.fuse_act = act.has_value();
  args.act = act.value_or(Activation::kSilu);
  args.mxfp4_fast_scales =
      w.mxfp4() && w.scale_min >= cuda::kMxfp4FastScaleMin && w.scale_max <= cuda::kMxfp4FastScaleMax;
  args.k_segment_steps = cuda::moe_k_segment_steps(k, kernel_options_.moe_k_segments);
  if (args.k_segment_steps > 0)
    args.fold_scratch = static_cast<float*>(grow_only(moe_fold_scratch_, moe_fold_scratch_captures_,
                                                      static_cast<size_t>(cuda::moe_fold_scratch_bytes(num_sms_)),
                                                      op, "expert GEMM fold"));
  CUDA_CHECK(cuda::launch_moe_expert_gemm(x.dtype, args, num_sms_, kernel_options_.moe_tiled_min_rows, stream()));
}

// moe_combine's views: out [T, H] rows, y [T * k, H] rows of out's dtype, topk_ids [T, k] i32 (k <= 32),
// topk_weights [T, k] f32.
std::pair<cuda::Rows, cuda::Rows> check_combine_views(const TensorView& out, const TensorView& y,
                                                      const TensorView& topk_ids, const TensorView& topk_weights,
                                                      const char* op) {
  const cuda::Rows dst = rows_of(out, op, "out"), in = rows_of(y, op, "y");
  CHECK_MSG(topk_ids.ndim() == 2 && topk_ids.size(0) == dst.num_rows && in.num_rows == topk_ids.numel() &&
                in.row_size == dst.row_size,
            "[cuda] {}: out{} y{} topk_ids{}", op, out.shape.to_string(), y.shape.to_string(), topk_ids.shape.to_string());
  check_dtype(y, out.dtype, op, "y");
  CHECK_MSG(is_float(out.dtype), "[cuda] {}: dtype {}", op, dtype_name(out.dtype));
  check_index_vector(topk_ids, DType::kI32, topk_ids.numel(), op, "topk_ids");
  check_index_vector(topk_weights, DType::kF32, topk_ids.numel(), op, "topk_weights");
  CHECK_MSG(topk_ids.size(1) <= 32, "[cuda] {}: {} experts per token; the combine takes at most 32", op, topk_ids.size(1));
  return {dst, in};
}

void CudaBackend::moe_combine(TensorView out, const TensorView& y, const TensorView& topk_ids,
                              const TensorView& topk_weights, bool accumulate) {
  const auto [dst, in] = check_combine_views(out, y, topk_ids, topk_weights, "moe_combine");
  CUDA_CHECK(cuda::launch_moe_combine(out.dtype, dst, in, topk_ids.ptr<int32_t>(), topk_weights.ptr<float>(),
                                      topk_ids.size(1), accumulate, stream()));
}

void CudaBackend::moe_combine_add_rms_norm(TensorView out, TensorView hidden, TensorView normed, const TensorView& y,
                                           const TensorView& topk_ids, const TensorView& topk_weights, bool accumulate,
                                           const TensorView& w, float eps, NormWeight mode) {
  const char* op = "moe_combine_add_rms_norm";
  const auto [dst, in] = check_combine_views(out, y, topk_ids, topk_weights, op);
  const cuda::Rows h = rows_of(hidden, op, "hidden"), n = rows_of(normed, op, "normed");
  check_add_norm_views(h, n, dst, hidden, normed, out, w, op);
  CUDA_CHECK(cuda::launch_moe_combine_add_rms_norm(out.dtype, dst, h, n, in, topk_ids.ptr<int32_t>(),
                                                   topk_weights.ptr<float>(), topk_ids.size(1), accumulate, w.data,
                                                   eps, cuda::norm_form(mode), stream()));
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

CudaPlacement cuda_placement(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  CHECK_MSG(cuda != nullptr, "cuda_placement of a {} backend", backend.name());
  return cuda->placement();
}

Expected<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return not_found("[cuda] no CUDA device: {}", cudaGetErrorString(status));
  }
  if (count == 0) return not_found("[cuda] no CUDA device: cudaGetDeviceCount found none");
  if (device < 0 || device >= count)
    return not_found("[cuda] no CUDA device {}: this process sees {} GPU(s)", device, count);
  CUDA_CHECK(cudaSetDevice(device));
  int num_sms = 0, pools_supported = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, device));
  if (!pools_supported) return unimplemented("[cuda] device {} has no stream-ordered memory pools", device);
  // Keep freed memory in the pool instead of returning it to the driver at every synchronisation:
  // the runner frees and re-allocates its per-step buffers each step.
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cudaStream_t raw_stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  std::shared_ptr<CUstream_st> stream(raw_stream, [](cudaStream_t s) { (void)cudaStreamDestroy(s); });
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device, std::move(stream), num_sms));
}

}  // namespace pagellm
