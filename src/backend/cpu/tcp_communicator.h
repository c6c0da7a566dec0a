// The CPU Communicator of a tensor-parallel group of processes (backend/tcp_group.h: rank 0 the hub
// of a star of TCP connections). all_reduce_sum: every rank sends its tensor to rank 0, which sums
// them in f32 in rank order 0, 1, ..., rounds once and sends the result back, the very operations
// of the threads twin (thread_communicator.h), so a split over processes gives the bits of a split
// over threads. gather_columns collects at rank 0 (the only root the star has).
#pragma once

#include <memory>

#include "backend/communicator.h"
#include "backend/tcp_group.h"

namespace pagellm {

std::unique_ptr<Communicator> make_tcp_communicator(std::shared_ptr<TcpGroup> group);

}  // namespace pagellm
