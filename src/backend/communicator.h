// Communicator: the collectives of tensor parallelism, one object per rank. The ranks of a group run
// the same model shard by shard in lockstep; every rank calls every collective in the same order.
// The CPU twin (cpu/thread_communicator.h: ranks as threads of one process) sums in a fixed rank
// order, so results do not depend on timing; the GPU one runs over NCCL.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"

namespace pagellm {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // inout = the sum over ranks of each rank's inout (same shape and dtype on every rank, contiguous,
  // f32 / bf16 / f16): summed in f32 in rank order 0, 1, ..., rounded once to the dtype; every rank
  // ends with the same bits.
  virtual void all_reduce_sum(TensorView inout) = 0;
  // Rank `root` gets out[R, sum_r C_r] = in_0 | in_1 | ... (each rank's in [R, C_r] side by side in
  // rank order; C_r may differ); `out` is read on the root only (pass an empty view elsewhere).
  virtual void gather_columns(TensorView out, const TensorView& in, int root = 0) = 0;
  // Whether the collectives may be recorded into a CUDA graph (queued device work only: no host
  // waits, no host memory between the ranks).
  virtual bool is_graph_capturable() const { return false; }
};

// The part of a dimension of `total` that rank `rank` of `size` holds when split as evenly as possible
// in contiguous pieces of ceil(total / size) (the last ranks may hold less, or nothing).
struct ShardRange {
  int64_t begin = 0, count = 0;
};
ShardRange shard_range(int64_t total, int rank, int size);

}  // namespace pagellm
