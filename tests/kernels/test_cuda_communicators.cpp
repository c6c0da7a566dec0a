// The collectives of CUDA ranks on GPUs of their own (backend/cuda/cuda_communicators.h) against their
// CPU twin (ranks as threads, sums in rank order): the peer-memory kernels give the twin's bits for
// every size (pushed into the peers' inboxes, staged, or sliced through the staging buffer), in eager launches and replayed graphs, and
// gather uneven column blocks; NCCL's two-rank sums equal them too. Needs two GPUs (skips otherwise).
#include <thread>

#include <gtest/gtest.h>

#include "backend/cpu/thread_communicator.h"
#include "cuda_test_util.h"

namespace pagellm {
namespace {

using cuda_test::random_tensor;
using cuda_test::Rng;
using cuda_test::to_device;
using cuda_test::to_host;

struct GpuGroup {
  std::unique_ptr<Backend> rank0;
  std::vector<std::unique_ptr<Backend>> others;
  Backend& rank(int r) { return r == 0 ? *rank0 : *others[static_cast<size_t>(r) - 1]; }
};

// Two ranks on GPUs 0 and 1 with `communicator`'s collectives, or nullopt with `why` set.
std::optional<GpuGroup> make_group(const std::string& communicator, std::string* why) {
  auto rank0 = make_backend("cuda");
  if (!rank0.has_value()) {
    *why = rank0.status().message();
    return std::nullopt;
  }
  auto others = make_tensor_parallel_group(**rank0, 2, /*share_device=*/false, communicator);
  if (!others.has_value()) {
    *why = others.status().message();
    return std::nullopt;
  }
  return GpuGroup{std::move(rank0).value(), std::move(others).value()};
}

#define TWO_GPUS_OR_SKIP(group, communicator)                                  \
  std::string group##_why;                                                     \
  std::optional<GpuGroup> group = make_group(communicator, &group##_why);      \
  if (!group) GTEST_SKIP() << "needs two GPUs with " << communicator << ": " << group##_why

// Runs fn(rank) on one thread per rank, each bound to its device.
void on_ranks(GpuGroup& group, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      group.rank(r).make_current();
      fn(r);
      group.rank(r).synchronize();
    });
  for (std::thread& t : threads) t.join();
}

// The twin's all-reduce of the same host tensors.
std::vector<Tensor> twin_all_reduce(const std::vector<Tensor>& inputs) {
  auto comms = make_thread_communicators(static_cast<int>(inputs.size()));
  std::vector<Tensor> outs;
  for (const Tensor& in : inputs) {
    Tensor copy = Tensor::cpu(in.shape(), in.dtype());
    std::memcpy(copy.view().data, in.view().data, in.nbytes());
    outs.push_back(copy);
  }
  std::vector<std::thread> threads;
  for (size_t r = 0; r < inputs.size(); ++r)
    threads.emplace_back([&, r] { comms[r]->all_reduce_sum(outs[r].view()); });
  for (std::thread& t : threads) t.join();
  return outs;
}

void expect_same_bytes(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(std::memcmp(a.view().data, b.view().data, a.nbytes()), 0) << what;
}

void check_all_reduce(GpuGroup& group, DType dtype, int64_t count, uint64_t seed) {
  Rng rng(seed);
  std::vector<Tensor> inputs;
  for (int r = 0; r < 2; ++r) inputs.push_back(random_tensor(Shape{count}, dtype, rng, -4.0f, 4.0f));
  const std::vector<Tensor> expected = twin_all_reduce(inputs);
  std::vector<Tensor> on_gpu(2);
  on_ranks(group, [&](int r) {
    on_gpu[static_cast<size_t>(r)] = to_device(group.rank(r), inputs[static_cast<size_t>(r)].view());
    group.rank(r).communicator()->all_reduce_sum(on_gpu[static_cast<size_t>(r)].view());
  });
  for (int r = 0; r < 2; ++r) {
    group.rank(r).make_current();
    expect_same_bytes(to_host(group.rank(r), on_gpu[static_cast<size_t>(r)].view()), expected[static_cast<size_t>(r)],
                      fmt::format("{} x {} on rank {}", count, dtype_name(dtype), r));
  }
}

TEST(CudaPeerCommunicator, AllReduceGivesTheTwinsBitsForEverySize) {
  TWO_GPUS_OR_SKIP(group, "peer");
  // Pushed (up to 1 MiB): one element, a ragged tail, one block, many blocks; staged: 2 and 4 MiB; past
  // the 8 MiB staging buffer (sliced).
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{3 * 4096 + 5}, int64_t{1} << 20,
                        (int64_t{5} << 20) + 3}) {
    check_all_reduce(*group, DType::kBF16, count, 7 + static_cast<uint64_t>(count));
    check_all_reduce(*group, DType::kF32, count, 11 + static_cast<uint64_t>(count));
  }
  check_all_reduce(*group, DType::kF16, 5000, 3);
}

TEST(CudaPeerCommunicator, ManyCollectivesInARowStayInStep) {
  TWO_GPUS_OR_SKIP(group, "peer");
  // The flags count up with every collective: push messages (up to 1 MiB) of one block and of many,
  // and staged ones (larger) whose blocks keep counts of their own, in turn; each push collective
  // reuses the inbox half of the one before the last.
  const int64_t sizes[3] = {8, 300000, 700000};  // bf16: 16 B, ~600 KB (push), 1.4 MB (staged)
  for (int round = 0; round < 42; ++round)
    check_all_reduce(*group, DType::kBF16, sizes[round % 3] + round, 100 + static_cast<uint64_t>(round));
}

TEST(CudaPeerCommunicator, GatherColumnsPutsUnevenBlocksSideBySideOnTheRoot) {
  TWO_GPUS_OR_SKIP(group, "peer");
  // [rows, 5] split 3 | 2; and a gather of logits rows wider than the staging buffer holds at once.
  for (auto [rows, total] : {std::pair<int64_t, int64_t>{3, 5}, {300, 151936}}) {
    const int64_t widths[2] = {shard_range(total, 0, 2).count, shard_range(total, 1, 2).count};
    Rng rng(static_cast<uint64_t>(rows));
    std::vector<Tensor> parts;
    for (int r = 0; r < 2; ++r) parts.push_back(random_tensor(Shape{rows, widths[r]}, DType::kF32, rng));
    Tensor out_gpu;
    std::vector<Tensor> in_gpu(2);
    group->rank0->make_current();
    out_gpu = group->rank0->alloc(Shape{rows, total}, DType::kF32);
    group->rank0->synchronize();
    on_ranks(*group, [&](int r) {
      in_gpu[static_cast<size_t>(r)] = to_device(group->rank(r), parts[static_cast<size_t>(r)].view());
      group->rank(r).communicator()->gather_columns(r == 0 ? out_gpu.view() : TensorView(),
                                                    in_gpu[static_cast<size_t>(r)].view());
    });
    group->rank0->make_current();
    const Tensor out = to_host(*group->rank0, out_gpu.view());
    for (int64_t row = 0; row < rows; row += std::max<int64_t>(1, rows / 7))
      for (int64_t c = 0; c < total; c += std::max<int64_t>(1, total / 11)) {
        const int r = c < widths[0] ? 0 : 1;
        const int64_t local = c - (r == 0 ? 0 : widths[0]);
        ASSERT_EQ(out.view().ptr<float>()[row * total + c],
                  parts[static_cast<size_t>(r)].view().ptr<float>()[row * widths[r] + local])
            << "row " << row << " column " << c;
      }
  }
}

TEST(CudaPeerCommunicator, CollectivesReplayFromCapturedGraphs) {
  TWO_GPUS_OR_SKIP(group, "peer");
  ASSERT_TRUE(group->rank0->communicator()->is_graph_capturable());
  const int64_t count = 4096 * 3;
  std::vector<Tensor> on_gpu(2);
  std::vector<std::unique_ptr<OpGraph>> graphs(2);
  on_ranks(*group, [&](int r) {  // two all-reduces per graph, as a decoder layer has
    on_gpu[static_cast<size_t>(r)] = group->rank(r).alloc(Shape{count}, DType::kBF16);
    group->rank(r).synchronize();
    graphs[static_cast<size_t>(r)] = group->rank(r).capture([&] {
      group->rank(r).communicator()->all_reduce_sum(on_gpu[static_cast<size_t>(r)].view());
      group->rank(r).communicator()->all_reduce_sum(on_gpu[static_cast<size_t>(r)].view());
    });
  });
  for (int replay = 0; replay < 5; ++replay) {
    Rng rng(50 + static_cast<uint64_t>(replay));
    std::vector<Tensor> inputs;
    for (int r = 0; r < 2; ++r) inputs.push_back(random_tensor(Shape{count}, DType::kBF16, rng));
    const std::vector<Tensor> expected = twin_all_reduce(twin_all_reduce(inputs));
    on_ranks(*group, [&](int r) {
      group->rank(r).copy(on_gpu[static_cast<size_t>(r)].view(), inputs[static_cast<size_t>(r)].view());
      graphs[static_cast<size_t>(r)]->replay();
    });
    for (int r = 0; r < 2; ++r) {
      group->rank(r).make_current();
      expect_same_bytes(to_host(group->rank(r), on_gpu[static_cast<size_t>(r)].view()), expected[static_cast<size_t>(r)],
                        fmt::format("replay {} rank {}", replay, r));
    }
  }
}

TEST(CudaNcclCommunicator, TwoRankSumsEqualThePeerKernels) {
  TWO_GPUS_OR_SKIP(group, "nccl");
  for (int64_t count : {int64_t{1}, int64_t{4096}, int64_t{1} << 20}) {
    check_all_reduce(*group, DType::kBF16, count, 21 + static_cast<uint64_t>(count));
    check_all_reduce(*group, DType::kF32, count, 23 + static_cast<uint64_t>(count));
  }
}

}  // namespace
}  // namespace pagellm
