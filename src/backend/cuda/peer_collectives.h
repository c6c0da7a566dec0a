// The launchers of peer_collectives.cu: collectives of CUDA ranks on GPUs of one process that reach
// each other's memory (NVLink / PCIe peer access), for cuda_communicators.cpp. Free of fmt/Tensor, as
// kernels.h.
//
// Each rank owns a staging buffer and a flag table in its device memory that every other rank can read
// and write (and an inbox for the push all-reduce of small messages, below). A collective is one
// kernel per rank: its blocks copy their slice of the rank's input into
// the rank's staging buffer, meet the blocks of the same index on every other rank (a flag each way),
// read the slice from every rank's buffer in rank order, and meet them again before a later collective
// may overwrite the buffers. Only kernels and device memory are involved, so the collectives can be
// captured in a CUDA graph, and the sum of the all-reduce is the same-device group's (rank order,
// f32, one rounding): every rank gets the same bits, whatever the size of the message.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace pagellm::cuda {

struct PeerGroup {
  static constexpr int kMaxRanks = 8;
  static constexpr int kMaxBlocks = 64;
  void* buffers[kMaxRanks] = {};          // rank r's staging buffer, on rank r's GPU
  uint32_t* flags[kMaxRanks] = {};        // rank r's flags [kMaxBlocks][kMaxRanks], written by the others
  uint32_t* epochs = nullptr;             // this rank's per-block collective counters [kMaxBlocks]
  // The push all-reduce (small messages): rank r's inbox on rank r's GPU, [2][num_ranks][kPushLines]
  // lines of 16 bytes (8 bytes of data, each half with the collective's flag), written by the others;
  // and this rank's counters of push collectives and of the blocks done with the current one.
  void* inboxes[kMaxRanks] = {};
  uint32_t* push_counters = nullptr;      // [2]
  int64_t buffer_bytes = 0;               // each staging buffer's size
  int num_ranks = 0;
  int rank = 0;                           // this rank
};

// How many bytes of the staging buffer hold one slice of a message.
constexpr int64_t kPeerBufferBytes = int64_t{8} << 20;

// The push all-reduce carries messages of up to this many bytes (the lines of one sender's inbox
// part hold 8 bytes each).
constexpr int64_t kPushMaxBytes = int64_t{1} << 20;
constexpr int64_t kPushLines = kPushMaxBytes / 8;
constexpr int64_t kPushInboxLineBytes = 16;

// data[i] = cast(sum over ranks r in order of rank r's data[i]) for i < count (count * element size
// <= group.buffer_bytes); the same count and dtype on every rank.
//
// Messages of up to kPushMaxBytes take the push form, one crossing of the link instead of four: each
// rank writes its data straight into every other rank's inbox, each 8 bytes beside the collective's
// number (stored as one 16-byte line, so a reader that sees the number sees the data), and sums what
// arrives in its own memory in rank order, waiting on nothing else. Numbers count push collectives
// (never reset), and consecutive ones alternate between two halves of the inbox: a rank can be at most
// one collective ahead of another (it needs every line of the other's current one to finish its own).
// Larger messages stage through the buffers and meet twice per block.
cudaError_t launch_peer_all_reduce(DType dtype, const PeerGroup& group, void* data, int64_t count,
                                   cudaStream_t stream);

// Rank `root` gets out[rows, total_columns] with rank r's in[rows, columns[r]] at column offsets[r]
// (row-major, contiguous); every rank passes its own `in` ([rows, columns[rank]]); `out` is written
// on the root only. rows * max(columns) * element <= group.buffer_bytes.
struct ColumnParts {
  int64_t columns[PeerGroup::kMaxRanks] = {};
  int64_t offsets[PeerGroup::kMaxRanks] = {};
};
cudaError_t launch_peer_gather_columns(int64_t element_bytes, const PeerGroup& group, void* out, int64_t total_columns,
                                       const void* in, int64_t rows, const ColumnParts& parts, int root,
                                       cudaStream_t stream);

}  // namespace pagellm::cuda
