#include "backend/cuda/cuda_communicators.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/collectives.h"
#include "backend/cuda/peer_collectives.h"
#include "backend/rank_group.h"
#include "backend/tcp_group.h"
#include "core/logging.h"

namespace pagellm {

namespace {

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16; }

// Copies rank `rank`'s [R, C_r] block into columns [column, column + C_r) of out [R, C] (device memory).
void copy_columns(const TensorView& out, const TensorView& part, int64_t column, cudaStream_t stream) {
  const size_t element = dtype_size_bytes(part.dtype);
  CUDA_CHECK(cudaMemcpy2DAsync(out.ptr<char>() + column * element, static_cast<size_t>(out.size(1)) * element,
                               part.data, static_cast<size_t>(part.size(1)) * element,
                               static_cast<size_t>(part.size(1)) * element, static_cast<size_t>(part.size(0)),
                               cudaMemcpyDefault, stream));
}

void check_gather_shapes(const TensorView& out, const TensorView& in) {
  CHECK_MSG(in.ndim() == 2 && in.is_contiguous() && out.ndim() == 2 && out.is_contiguous() &&
                out.size(0) == in.size(0) && out.dtype == in.dtype,
            "gather_columns: out [rows, total columns] and in [rows, columns], contiguous, one dtype");
}

// Every GPU of `devices` reads and writes the others' memory: their cudaMalloc'd memory and their
// default memory pools (where the backends' tensors come from: a rank copies the step's inputs out
// of rank 0's). Restores device devices[0].
Status enable_peer_access(const std::vector<int>& devices) {
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b));
      if (!can) return unimplemented("[cuda] GPU {} cannot reach GPU {}'s memory (no peer access)", a, b);
      CUDA_CHECK(cudaSetDevice(a));
      const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else if (status != cudaSuccess) {
        (void)cudaGetLastError();
        return internal_error("[cuda] GPU {} could not map GPU {}'s memory: {}", a, b, cudaGetErrorString(status));
      }
      cudaMemPool_t pool;
      CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, b));
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = a;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      CUDA_CHECK(cudaMemPoolSetAccess(pool, &access, 1));
    }
  }
  CUDA_CHECK(cudaSetDevice(devices[0]));
  return Status::ok();
}

// ---- ranks sharing one GPU ----

class SameDeviceCommunicator final : public Communicator {
 public:
  SameDeviceCommunicator(std::shared_ptr<RankGroup> group, int rank, CudaPlacement placement)
      : group_(std::move(group)), rank_(rank), placement_(placement) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  void all_reduce_sum(TensorView inout) override {
    CHECK_MSG(inout.device == Device::kCuda && inout.is_contiguous() && is_float(inout.dtype),
              "all_reduce_sum wants a contiguous float tensor on the GPU");
    const int64_t count = inout.numel();
    const size_t bytes = inout.nbytes();
    publish(inout);
    cuda::RankBuffers parts;
    CHECK(size() <= cuda::RankBuffers::kMaxRanks);
    for (const TensorView& part : group_->published()) {
      CHECK_MSG(part.numel() == count && part.dtype == inout.dtype, "all_reduce_sum: the ranks' tensors differ");
      parts.data[parts.num_ranks++] = part.data;
    }
    void* sum = nullptr;
    CUDA_CHECK(cudaMallocAsync(&sum, bytes, stream()));
    CUDA_CHECK(cuda::launch_sum_ranks(inout.dtype, parts, sum, count, stream()));
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    group_->meet();  // every rank has read every buffer: each may overwrite its own
    CUDA_CHECK(cudaMemcpyAsync(inout.data, sum, bytes, cudaMemcpyDeviceToDevice, stream()));
    CUDA_CHECK(cudaFreeAsync(sum, stream()));
  }

  void gather_columns(TensorView out, const TensorView& in, int root) override {
    publish(in);
    if (rank_ == root) {
      check_gather_shapes(out, in);
      int64_t column = 0;
      for (const TensorView& part : group_->published()) {
        CHECK(part.size(0) == in.size(0) && part.dtype == in.dtype && column + part.size(1) <= out.size(1));
        copy_columns(out, part, column, stream());
        column += part.size(1);
      }
      CHECK_MSG(column == out.size(1), "gather_columns: the ranks' columns add up to {}, out has {}", column,
                out.size(1));
      CUDA_CHECK(cudaStreamSynchronize(stream()));
    }
    group_->meet();  // the root has copied every part out
  }

 private:
  cudaStream_t stream() const { return placement_.stream; }
  // The rank's own work is done before the others read its buffer.
  void publish(const TensorView& view) {
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    group_->publish(rank_, view);
  }

  std::shared_ptr<RankGroup> group_;
  int rank_;
  CudaPlacement placement_;
};

// ---- ranks on GPUs of their own that reach each other's memory ----

// Each rank's staging buffer, flag table and counters, freed on the rank's device.
class PeerMemory {
 public:
  explicit PeerMemory(const std::vector<int>& devices) {
    const int size = static_cast<int>(devices.size());
    groups_.resize(devices.size());
    for (int r = 0; r < size; ++r) {
      CUDA_CHECK(cudaSetDevice(devices[static_cast<size_t>(r)]));
      void* buffer = nullptr;
      uint32_t *flags = nullptr, *epochs = nullptr;
      const size_t flag_bytes = sizeof(uint32_t) * cuda::PeerGroup::kMaxBlocks * cuda::PeerGroup::kMaxRanks;
      CUDA_CHECK(cudaMalloc(&buffer, cuda::kPeerBufferBytes));
      CUDA_CHECK(cudaMalloc(&flags, flag_bytes));
      CUDA_CHECK(cudaMalloc(&epochs, sizeof(uint32_t) * cuda::PeerGroup::kMaxBlocks));
      CUDA_CHECK(cudaMemset(flags, 0, flag_bytes));
      CUDA_CHECK(cudaMemset(epochs, 0, sizeof(uint32_t) * cuda::PeerGroup::kMaxBlocks));
      // The push all-reduce's inbox: two halves of a part per sender; flags 0 (the first collective's is 1).
      void* inbox = nullptr;
      uint32_t* push_counters = nullptr;
      const size_t inbox_bytes = 2 * static_cast<size_t>(size) * cuda::kPushLines * cuda::kPushInboxLineBytes;
      CUDA_CHECK(cudaMalloc(&inbox, inbox_bytes));
      CUDA_CHECK(cudaMalloc(&push_counters, 2 * sizeof(uint32_t)));
      CUDA_CHECK(cudaMemset(inbox, 0, inbox_bytes));
      CUDA_CHECK(cudaMemset(push_counters, 0, 2 * sizeof(uint32_t)));
      for (void* ptr : {buffer, static_cast<void*>(flags), static_cast<void*>(epochs), inbox,
                        static_cast<void*>(push_counters)})
        allocations_.push_back({devices[static_cast<size_t>(r)], ptr});
      for (cuda::PeerGroup& g : groups_) {
        g.buffers[r] = buffer;
        g.flags[r] = flags;
        g.inboxes[r] = inbox;
      }
      groups_[static_cast<size_t>(r)].epochs = epochs;
      groups_[static_cast<size_t>(r)].push_counters = push_counters;
      groups_[static_cast<size_t>(r)].rank = r;
    }
    for (cuda::PeerGroup& g : groups_) {
      g.num_ranks = size;
      g.buffer_bytes = cuda::kPeerBufferBytes;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~PeerMemory() {
    for (const auto& [device, ptr] : allocations_) {
      (void)cudaSetDevice(device);
      (void)cudaFree(ptr);
    }
  }
  const cuda::PeerGroup& group(int rank) const { return groups_[static_cast<size_t>(rank)]; }

 private:
  std::vector<cuda::PeerGroup> groups_;
  std::vector<std::pair<int, void*>> allocations_;
};

class PeerCommunicator final : public Communicator {
 public:
  PeerCommunicator(std::shared_ptr<PeerMemory> memory, std::shared_ptr<RankGroup> group, int rank,
                   CudaPlacement placement)
      : memory_(std::move(memory)), group_(std::move(group)), rank_(rank), placement_(placement) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  bool is_graph_capturable() const override { return true; }

  // Messages larger than the staging buffer go through it in slices (each element is summed the same
  // way whatever the slicing).
  void all_reduce_sum(TensorView inout) override {
    CHECK_MSG(inout.device == Device::kCuda && inout.is_contiguous() && is_float(inout.dtype),
              "all_reduce_sum wants a contiguous float tensor on the GPU");
    const int64_t element = static_cast<int64_t>(dtype_size_bytes(inout.dtype));
    const int64_t slice = cuda::kPeerBufferBytes / element / 8 * 8;
    for (int64_t begin = 0; begin < inout.numel(); begin += slice) {
      const int64_t count = std::min(slice, inout.numel() - begin);
      CUDA_CHECK(cuda::launch_peer_all_reduce(inout.dtype, memory_->group(rank_), inout.ptr<char>() + begin * element,
                                              count, stream()));
    }
  }

  void gather_columns(TensorView out, const TensorView& in, int root) override {
    CHECK_MSG(in.device == Device::kCuda && in.ndim() == 2 && in.is_contiguous(),
              "gather_columns wants a contiguous 2-D GPU tensor");
    if (rank_ == root) check_gather_shapes(out, in);
    // The ranks' widths (host memory of this process): every rank slices the message alike.
    group_->publish(rank_, in);
    cuda::ColumnParts parts;
    int64_t widest = 0, column = 0;
    for (int r = 0; r < size(); ++r) {
      const TensorView& part = group_->published()[static_cast<size_t>(r)];
      CHECK_MSG(part.size(0) == in.size(0) && part.dtype == in.dtype, "gather_columns: the ranks' tensors differ");
      parts.columns[r] = part.size(1);
      parts.offsets[r] = column;
      column += part.size(1);
      widest = std::max(widest, part.size(1));
    }
    group_->meet();  // every rank has read the widths before any publishes again
    if (rank_ == root)
      CHECK_MSG(column == out.size(1), "gather_columns: the ranks' columns add up to {}, out has {}", column, out.size(1));
    const int64_t element = static_cast<int64_t>(dtype_size_bytes(in.dtype));
    if (widest == 0) return;
    const int64_t rows_per_slice = std::max<int64_t>(1, cuda::kPeerBufferBytes / (widest * element));
    CHECK_MSG(widest * element <= cuda::kPeerBufferBytes, "gather_columns: a row of {} bytes exceeds the staging buffer",
              widest * element);
    for (int64_t row = 0; row < in.size(0); row += rows_per_slice) {
      const int64_t rows = std::min(rows_per_slice, in.size(0) - row);
      void* out_rows = rank_ == root ? out.ptr<char>() + row * column * element : nullptr;
      CUDA_CHECK(cuda::launch_peer_gather_columns(element, memory_->group(rank_), out_rows, column,
                                                  in.ptr<char>() + row * in.size(1) * element, rows, parts, root,
                                                  stream()));
    }
  }

 private:
  cudaStream_t stream() const { return placement_.stream; }

  std::shared_ptr<PeerMemory> memory_;
  std::shared_ptr<RankGroup> group_;
  int rank_;
  CudaPlacement placement_;
};

// ---- NCCL, loaded at run time ----

struct NcclApi {
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

Expected<const NcclApi*> load_nccl() {
  static NcclApi api;
  static std::string error;
  static const bool loaded = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      error = dlerror();
      return false;
    }
    auto find = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) error = std::string("no symbol ") + name;
      return fn != nullptr;
    };
    return find(api.comm_init_all, "ncclCommInitAll") && find(api.get_unique_id, "ncclGetUniqueId") &&
           find(api.comm_init_rank, "ncclCommInitRank") && find(api.comm_destroy, "ncclCommDestroy") &&
           find(api.all_reduce, "ncclAllReduce") && find(api.send, "ncclSend") && find(api.recv, "ncclRecv") &&
           find(api.group_start, "ncclGroupStart") && find(api.group_end, "ncclGroupEnd") &&
           find(api.error_string, "ncclGetErrorString");
  }();
  if (!loaded) return unimplemented("[cuda] tensor parallelism over GPUs needs NCCL (libnccl.so.2): {}", error);
  return &api;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    default: CHECK_MSG(false, "NCCL collectives take float tensors, got {}", dtype_name(dtype));
  }
  return ncclFloat32;
}

#define NCCL_CHECK(api, expr)                                                                   \
  do {                                                                                          \
    const ncclResult_t _nccl_status = (expr);                                                   \
    CHECK_MSG(_nccl_status == ncclSuccess, "[cuda] NCCL: {} failed: {}", #expr,                 \
              (api)->error_string(_nccl_status));                                               \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclApi* api, ncclComm_t comm, int rank, int size, CudaPlacement placement)
      : api_(api), comm_(comm), rank_(rank), size_(size), placement_(placement) {}
  ~NcclCommunicator() override { (void)api_->comm_destroy(comm_); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool is_graph_capturable() const override { return true; }

  void all_reduce_sum(TensorView inout) override {
    CHECK_MSG(inout.device == Device::kCuda && inout.is_contiguous(), "all_reduce_sum wants a contiguous GPU tensor");
    NCCL_CHECK(api_, api_->all_reduce(inout.data, inout.data, static_cast<size_t>(inout.numel()), nccl_type(inout.dtype),
                                      ncclSum, comm_, stream()));
  }

  // The parts may differ in width, so they travel point to point (padded to the widest) and the root
  // lays them side by side.
  void gather_columns(TensorView out, const TensorView& in, int root) override {
    CHECK_MSG(in.ndim() == 2 && in.is_contiguous(), "gather_columns wants a contiguous 2-D tensor");
    const size_t element = dtype_size_bytes(in.dtype);
    const int64_t width = (out.ndim() == 2 && rank_ == root) ? out.size(1) : 0;
    if (rank_ != root) {
      NCCL_CHECK(api_, api_->send(in.data, static_cast<size_t>(in.numel()), nccl_type(in.dtype), root, comm_, stream()));
      return;
    }
    check_gather_shapes(out, in);
    // Rank r's block: shard_range of the total columns (model/ code splits that way).
    std::vector<void*> staging(static_cast<size_t>(size_), nullptr);
    NCCL_CHECK(api_, api_->group_start());
    for (int r = 0; r < size_; ++r) {
      if (r == root) continue;
      const ShardRange cols = shard_range(width, r, size_);
      CUDA_CHECK(cudaMallocAsync(&staging[static_cast<size_t>(r)], static_cast<size_t>(in.size(0) * cols.count) * element,
                                 stream()));
      NCCL_CHECK(api_, api_->recv(staging[static_cast<size_t>(r)], static_cast<size_t>(in.size(0) * cols.count),
                                  nccl_type(in.dtype), r, comm_, stream()));
    }
    NCCL_CHECK(api_, api_->group_end());
    for (int r = 0; r < size_; ++r) {
      const ShardRange cols = shard_range(width, r, size_);
      const TensorView part =
          r == root ? in : TensorView(staging[static_cast<size_t>(r)], Shape{in.size(0), cols.count}, in.dtype, Device::kCuda);
      copy_columns(out, part, cols.begin, stream());
      if (r != root) CUDA_CHECK(cudaFreeAsync(staging[static_cast<size_t>(r)], stream()));
    }
  }

 private:
  cudaStream_t stream() const { return placement_.stream; }

  const NcclApi* api_;
  ncclComm_t comm_;
  int rank_, size_;
  CudaPlacement placement_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_same_device_communicators(const std::vector<Backend*>& ranks) {
  auto group = std::make_shared<RankGroup>(static_cast<int>(ranks.size()));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out.push_back(std::make_unique<SameDeviceCommunicator>(group, static_cast<int>(r), cuda_placement(*ranks[r])));
  return out;
}

Expected<std::vector<std::unique_ptr<Communicator>>> make_peer_communicators(const std::vector<Backend*>& ranks) {
  if (ranks.size() > static_cast<size_t>(cuda::PeerGroup::kMaxRanks))
    return unimplemented("[cuda] peer-memory collectives take at most {} GPUs, not {}", cuda::PeerGroup::kMaxRanks,
                         ranks.size());
  std::vector<int> devices;
  for (Backend* rank : ranks) devices.push_back(cuda_placement(*rank).device);
  PAGELLM_RETURN_IF_ERROR(enable_peer_access(devices));
  auto memory = std::make_shared<PeerMemory>(devices);
  auto group = std::make_shared<RankGroup>(static_cast<int>(ranks.size()));
  CUDA_CHECK(cudaSetDevice(devices[0]));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out.push_back(std::make_unique<PeerCommunicator>(memory, group, static_cast<int>(r), cuda_placement(*ranks[r])));
  return out;
}

Expected<std::unique_ptr<Communicator>> make_nccl_process_communicator(Backend& backend, TcpGroup& group) {
  PAGELLM_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  ncclUniqueId id{};
  if (group.rank() == 0) {
    const ncclResult_t status = api->get_unique_id(&id);
    if (status != ncclSuccess) return internal_error("[cuda] NCCL could not make a group id: {}", api->error_string(status));
    for (int peer = 1; peer < group.size(); ++peer) group.send(peer, &id, sizeof(id), "NCCL's group id");
  } else {
    group.recv(0, &id, sizeof(id), "NCCL's group id");
  }
  const CudaPlacement placement = cuda_placement(backend);
  CUDA_CHECK(cudaSetDevice(placement.device));
  ncclComm_t comm = nullptr;
  const ncclResult_t status = api->comm_init_rank(&comm, group.size(), id, group.rank());
  if (status != ncclSuccess)
    return internal_error("[cuda] NCCL could not join rank {} to its group of {}: {}", group.rank(), group.size(),
                          api->error_string(status));
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(api, comm, group.rank(), group.size(), placement));
}

Expected<std::vector<std::unique_ptr<Communicator>>> make_nccl_communicators(const std::vector<Backend*>& ranks) {
  PAGELLM_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off unless asked for
  std::vector<int> devices;
  for (Backend* rank : ranks) devices.push_back(cuda_placement(*rank).device);
  // The ranks copy the step's inputs from rank 0's memory: directly where the GPUs allow it.
  if (Status peers = enable_peer_access(devices); !peers.is_ok())
    LOG_INFO("[cuda] {}; the ranks' input copies go through the host", peers.message());
  std::vector<ncclComm_t> comms(ranks.size());
  const ncclResult_t status = api->comm_init_all(comms.data(), static_cast<int>(ranks.size()), devices.data());
  if (status != ncclSuccess)
    return internal_error("[cuda] NCCL could not make a group of {} GPUs: {}", ranks.size(), api->error_string(status));
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out.push_back(std::make_unique<NcclCommunicator>(api, comms[r], static_cast<int>(r), static_cast<int>(ranks.size()),
                                                     cuda_placement(*ranks[r])));
  return out;
}

}  // namespace pagellm
