#include "backend/cpu/thread_communicator.h"

#include "backend/rank_group.h"

#include <cstring>

#include "core/check.h"

namespace pagellm {

namespace {

bool is_contiguous_float(const TensorView& t) {
  return t.is_contiguous() && (t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16);
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<RankGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  void all_reduce_sum(TensorView inout) override {
    CHECK_MSG(inout.device == Device::kCpu && is_contiguous_float(inout), "all_reduce_sum wants a contiguous float "
              "host tensor");
    const size_t count = static_cast<size_t>(inout.numel());
    publish(inout);
    std::vector<float> sum(count, 0.0f), part(count);
    for (const TensorView& rank_view : group_->published()) {
      CHECK_MSG(static_cast<size_t>(rank_view.numel()) == count && rank_view.dtype == inout.dtype,
                "all_reduce_sum: the ranks passed tensors of different shapes or dtypes");
      convert_to_f32(rank_view.ptr<void>(), rank_view.dtype, part.data(), count);
      for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    }
    group_->meet();  // everyone has read every view: now each may overwrite its own
    convert_from_f32(sum.data(), inout.ptr<void>(), inout.dtype, count);
  }

  void gather_columns(TensorView out, const TensorView& in, int root) override {
    CHECK_MSG(in.device == Device::kCpu && in.ndim() == 2 && in.is_contiguous(), "gather_columns wants a "
              "contiguous 2-D host tensor");
    publish(in);
    if (rank_ == root) {
      CHECK_MSG(out.ndim() == 2 && out.is_contiguous() && out.size(0) == in.size(0) && out.dtype == in.dtype,
                "gather_columns: out must be [rows, total columns] of in's dtype");
      const size_t element_bytes = dtype_size_bytes(in.dtype);
      int64_t column = 0;
      for (const TensorView& part : group_->published()) {
        CHECK(part.size(0) == in.size(0) && part.dtype == in.dtype);
        const int64_t columns = part.size(1);
        CHECK(column + columns <= out.size(1));
        for (int64_t row = 0; row < in.size(0); ++row)
          std::memcpy(out.ptr<char>() + (row * out.size(1) + column) * element_bytes,
                      part.ptr<char>() + row * columns * element_bytes, static_cast<size_t>(columns) * element_bytes);
        column += columns;
      }
      CHECK_MSG(column == out.size(1), "gather_columns: the ranks' columns add up to {}, out has {}", column,
                out.size(1));
    }
    group_->meet();  // the root has copied every part out
  }

 private:
  void publish(const TensorView& view) { group_->publish(rank_, view); }

  std::shared_ptr<RankGroup> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size) {
  CHECK(size >= 1);
  auto group = std::make_shared<RankGroup>(size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

}  // namespace pagellm
