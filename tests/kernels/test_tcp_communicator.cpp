// The collectives of ranks as processes (backend/tcp_group.h, cpu/tcp_communicator.h), here as
// threads of one process over real TCP connections on 127.0.0.1: the group forms, all_reduce_sum
// gives the threads twin's bits (f32 and bf16, sums whose f32 result depends on the order), and
// gather_columns the twin's columns; a rank with another fingerprint is refused on both sides, and a
// rank without rank 0 gives up with a clear error after its start-up deadline.

#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "backend/cpu/tcp_communicator.h"
#include "backend/cpu/thread_communicator.h"
#include "core/dtype.h"
#include "../support/free_port.h"

namespace pagellm {
namespace {

TcpGroupOptions options_of(int rank, int size, int port, uint64_t fingerprint = 7) {
  TcpGroupOptions options;
  options.rank = rank;
  options.size = size;
  options.master_port = port;
  options.timeout_s = 20;
  options.startup_timeout_s = 20;
  options.fingerprint = fingerprint;
  return options;
}

// Forms a group of `size` ranks (threads) and runs fn(communicator) on each.
std::vector<Status> run_tcp_ranks(int size, const std::function<void(Communicator&)>& fn,
                                  const std::vector<uint64_t>& fingerprints = {}) {
  const int port = test::free_local_port();
  std::vector<Status> statuses(static_cast<size_t>(size), Status::ok());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] {
      const uint64_t fingerprint = fingerprints.empty() ? 7 : fingerprints[static_cast<size_t>(rank)];
      Expected<std::shared_ptr<TcpGroup>> group = TcpGroup::open(options_of(rank, size, port, fingerprint));
      if (!group.has_value()) {
        statuses[static_cast<size_t>(rank)] = group.status();
        return;
      }
      std::unique_ptr<Communicator> comm = make_tcp_communicator(group.value());
      fn(*comm);
    });
  for (std::thread& t : threads) t.join();
  return statuses;
}

void run_thread_ranks(int size, const std::function<void(Communicator&)>& fn) {
  auto comms = make_thread_communicators(size);
  std::vector<std::thread> threads;
  for (auto& comm : comms) threads.emplace_back([&fn, &comm] { fn(*comm); });
  for (std::thread& t : threads) t.join();
}

std::vector<std::vector<uint8_t>> random_parts(int size, int64_t count, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1e4f, 1e4f);
  std::vector<std::vector<uint8_t>> parts;
  for (int r = 0; r < size; ++r) {
    std::vector<float> f(static_cast<size_t>(count));
    for (float& x : f) x = value(rng) * (rng() % 3 == 0 ? 1e-4f : 1.0f);  // mixed magnitudes: order matters
    std::vector<uint8_t> raw(static_cast<size_t>(count) * dtype_size_bytes(dtype));
    convert_from_f32(f.data(), raw.data(), dtype, f.size());
    parts.push_back(raw);
  }
  return parts;
}

TEST(TcpCommunicator, AllReduceGivesTheThreadTwinsBitsOnEveryRank) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int size : {2, 3}) {
      const int64_t count = 1000;
      const auto inputs = random_parts(size, count, dtype, static_cast<uint32_t>(size));
      auto over_threads = inputs, over_tcp = inputs;
      auto reduce_into = [&](std::vector<std::vector<uint8_t>>& buffers) {
        return [&buffers, dtype, count](Communicator& comm) {
          for (int round = 0; round < 3; ++round)  // each round sums the last one's sums again
            comm.all_reduce_sum(
                TensorView(buffers[static_cast<size_t>(comm.rank())].data(), Shape{count}, dtype));
        };
      };
      run_thread_ranks(size, reduce_into(over_threads));
      for (const Status& s : run_tcp_ranks(size, reduce_into(over_tcp))) ASSERT_TRUE(s.is_ok()) << s.message();
      for (int r = 0; r < size; ++r)
        EXPECT_EQ(over_tcp[static_cast<size_t>(r)], over_threads[0]) << dtype_name(dtype) << " size " << size << " rank " << r;
    }
  }
}

TEST(TcpCommunicator, GatherColumnsPutsEachRanksColumnsSideBySideOnRankZero) {
  std::vector<std::vector<float>> parts = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}};
  const int64_t widths[3] = {2, 2, 1};
  std::vector<float> out(10, -1.0f);
  const auto statuses = run_tcp_ranks(3, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    TensorView in(parts[r].data(), Shape{2, widths[r]}, DType::kF32);
    comm.gather_columns(r == 0 ? TensorView(out.data(), Shape{2, 5}, DType::kF32) : TensorView(), in);
  });
  for (const Status& s : statuses) ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(out, (std::vector<float>{1, 2, 5, 6, 9, 3, 4, 7, 8, 10}));
}

TEST(TcpGroup, ARankWithAnotherFingerprintIsRefusedOnBothSides) {
  const auto statuses = run_tcp_ranks(2, [](Communicator&) {}, {7, 8});
  for (const Status& s : statuses) {
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("rank 1 runs a different model or engine config than rank 0"), std::string::npos)
        << s.message();
  }
}

TEST(TcpGroup, ARankWithoutRankZeroGivesUpAfterItsStartupDeadline) {
  TcpGroupOptions options = options_of(1, 2, test::free_local_port());
  options.startup_timeout_s = 0.5;
  const Expected<std::shared_ptr<TcpGroup>> group = TcpGroup::open(options);
  ASSERT_FALSE(group.has_value());
  EXPECT_NE(group.status().message().find("no rank 0 at 127.0.0.1:"), std::string::npos) << group.status().message();
}

}  // namespace
}  // namespace pagellm
