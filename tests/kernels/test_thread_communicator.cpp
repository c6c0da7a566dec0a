// The CPU twin of the tensor-parallel collectives: ranks as threads, sums in rank order.
#include <thread>

#include <gtest/gtest.h>

#include "backend/cpu/thread_communicator.h"
#include "core/dtype.h"

namespace pagellm {
namespace {

// Runs fn(rank) on `size` threads, one per communicator.
void run_ranks(std::vector<std::unique_ptr<Communicator>>& comms, const std::function<void(Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (auto& comm : comms) threads.emplace_back([&fn, &comm] { fn(*comm); });
  for (std::thread& t : threads) t.join();
}

TEST(ThreadCommunicator, AllReduceSumsInRankOrderAndEveryRankGetsTheSameBits) {
  const int size = 3;
  auto comms = make_thread_communicators(size);
  // Values whose f32 sum depends on the order: (1e8 + 1) - 1e8 = 0 in f32 when summed left to right.
  const std::vector<std::vector<float>> inputs = {{1e8f, 1.0f, 2.0f}, {1.0f, 2.0f, -3.0f}, {-1e8f, 3.0f, 0.5f}};
  std::vector<std::vector<float>> outputs = inputs;
  for (int round = 0; round < 50; ++round) {  // a race shows up as a wrong or unequal result in some round
    outputs = inputs;
    run_ranks(comms, [&](Communicator& comm) {
      std::vector<float>& mine = outputs[static_cast<size_t>(comm.rank())];
      comm.all_reduce_sum(TensorView(mine.data(), Shape{3}, DType::kF32));
    });
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(outputs[static_cast<size_t>(r)][0], (1e8f + 1.0f) + -1e8f) << "rank order 0, 1, 2";
      EXPECT_EQ(outputs[static_cast<size_t>(r)][1], 6.0f);
      EXPECT_EQ(outputs[static_cast<size_t>(r)][2], -0.5f);
    }
  }
}

TEST(ThreadCommunicator, AllReduceRoundsOnceToBf16) {
  auto comms = make_thread_communicators(3);
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7 is a bf16 value; rounding after each addition would give 1 twice over
  // (1 + 2^-8 lies halfway between bf16 neighbours and rounds to even, 1).
  std::vector<std::vector<uint16_t>> values(3, std::vector<uint16_t>(1));
  const float parts[3] = {1.0f, 0.00390625f, 0.00390625f};
  for (size_t r = 0; r < 3; ++r) convert_from_f32(&parts[r], values[r].data(), DType::kBF16, 1);
  run_ranks(comms, [&](Communicator& comm) {
    comm.all_reduce_sum(TensorView(values[static_cast<size_t>(comm.rank())].data(), Shape{1}, DType::kBF16));
  });
  float sum = 0.0f;
  convert_to_f32(values[0].data(), DType::kBF16, &sum, 1);
  EXPECT_EQ(sum, 1.0f + 0.0078125f);
  EXPECT_EQ(values[0], values[1]);
  EXPECT_EQ(values[0], values[2]);
}

TEST(ThreadCommunicator, GatherColumnsPutsEachRanksColumnsSideBySideOnTheRoot) {
  auto comms = make_thread_communicators(3);
  // Rank r holds a [2, C_r] block with C = 2, 2, 1 (an uneven last shard, as shard_range gives 5 columns).
  std::vector<std::vector<float>> parts = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10}};
  const int64_t widths[3] = {2, 2, 1};
  std::vector<float> out(10, -1.0f);
  run_ranks(comms, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    TensorView in(parts[r].data(), Shape{2, widths[r]}, DType::kF32);
    comm.gather_columns(r == 0 ? TensorView(out.data(), Shape{2, 5}, DType::kF32) : TensorView(), in);
  });
  EXPECT_EQ(out, (std::vector<float>{1, 2, 5, 6, 9, 3, 4, 7, 8, 10}));
}

TEST(ShardRange, SplitsEvenlyInContiguousPiecesWithTheRemainderLast) {
  EXPECT_EQ(shard_range(8, 1, 2).begin, 4);
  EXPECT_EQ(shard_range(8, 1, 2).count, 4);
  EXPECT_EQ(shard_range(5, 2, 3).begin, 4);
  EXPECT_EQ(shard_range(5, 2, 3).count, 1);
  EXPECT_EQ(shard_range(2, 3, 4).count, 0);  // more ranks than rows: the last hold nothing
  EXPECT_EQ(shard_range(7, 0, 1).count, 7);
}

}  // namespace
}  // namespace pagellm
