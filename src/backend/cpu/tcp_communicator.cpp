#include "backend/cpu/tcp_communicator.h"

#include <cstring>
#include <vector>

#include "core/check.h"

namespace pagellm {

namespace {

enum class Collective : uint32_t { kAllReduceSum = 1, kGatherColumns = 2 };

// Sent before each rank's part, so ranks that disagree on a collective stop with a clear message.
struct PartHeader {
  Collective collective = Collective::kAllReduceSum;
  uint32_t dtype = 0;
  int64_t rows = 0, columns = 0;
};

class TcpCommunicator final : public Communicator {
 public:
  explicit TcpCommunicator(std::shared_ptr<TcpGroup> group) : group_(std::move(group)) {}
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

  void all_reduce_sum(TensorView inout) override {
    CHECK_MSG(inout.device == Device::kCpu && inout.is_contiguous() &&
                  (inout.dtype == DType::kF32 || inout.dtype == DType::kBF16 || inout.dtype == DType::kF16),
              "all_reduce_sum wants a contiguous float host tensor");
    const size_t count = static_cast<size_t>(inout.numel()), bytes = count * dtype_size_bytes(inout.dtype);
    const PartHeader mine{Collective::kAllReduceSum, static_cast<uint32_t>(inout.dtype), 1, inout.numel()};
    if (rank() != 0) {
      group_->send(0, &mine, sizeof(mine), "all_reduce_sum");
      group_->send(0, inout.data, bytes, "all_reduce_sum");
      group_->recv(0, inout.data, bytes, "all_reduce_sum (waiting for the sum)");
      return;
    }
    std::vector<float> sum(count, 0.0f), part(count);
    convert_to_f32(inout.data, inout.dtype, part.data(), count);
    for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    std::vector<uint8_t> raw(bytes);
    for (int peer = 1; peer < size(); ++peer) {
      expect_header(peer, mine);
      group_->recv(peer, raw.data(), bytes, "all_reduce_sum");
      convert_to_f32(raw.data(), inout.dtype, part.data(), count);
      for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    }
    convert_from_f32(sum.data(), inout.data, inout.dtype, count);
    for (int peer = 1; peer < size(); ++peer) group_->send(peer, inout.data, bytes, "all_reduce_sum (the sum)");
  }

  void gather_columns(TensorView out, const TensorView& in, int root) override {
    CHECK_MSG(root == 0, "gather_columns over processes gathers at rank 0, not {}", root);
    CHECK_MSG(in.device == Device::kCpu && in.ndim() == 2 && in.is_contiguous(), "gather_columns wants a "
              "contiguous 2-D host tensor");
    const size_t element_bytes = dtype_size_bytes(in.dtype);
    const int64_t rows = in.size(0);
    if (rank() != 0) {
      const PartHeader mine{Collective::kGatherColumns, static_cast<uint32_t>(in.dtype), rows, in.size(1)};
      group_->send(0, &mine, sizeof(mine), "gather_columns");
      group_->send(0, in.data, static_cast<size_t>(in.numel()) * element_bytes, "gather_columns");
      return;
    }
    CHECK_MSG(out.ndim() == 2 && out.is_contiguous() && out.size(0) == rows && out.dtype == in.dtype,
              "gather_columns: out must be [rows, total columns] of in's dtype");
    int64_t column = 0;
    std::vector<uint8_t> part;
    auto place = [&](const uint8_t* data, int64_t columns) {
      CHECK_MSG(column + columns <= out.size(1), "gather_columns: the ranks' columns exceed out's {}", out.size(1));
      for (int64_t row = 0; row < rows; ++row)
        std::memcpy(out.ptr<char>() + (row * out.size(1) + column) * element_bytes,
                    data + row * columns * element_bytes, static_cast<size_t>(columns) * element_bytes);
      column += columns;
    };
    place(static_cast<const uint8_t*>(in.data), in.size(1));
    for (int peer = 1; peer < size(); ++peer) {
      PartHeader header;
      group_->recv(peer, &header, sizeof(header), "gather_columns");
      check_agrees(peer, header, Collective::kGatherColumns, in.dtype, rows);
      part.resize(static_cast<size_t>(header.rows * header.columns) * element_bytes);
      group_->recv(peer, part.data(), part.size(), "gather_columns");
      place(part.data(), header.columns);
    }
    CHECK_MSG(column == out.size(1), "gather_columns: the ranks' columns add up to {}, out has {}", column,
              out.size(1));
  }

 private:
  void expect_header(int peer, const PartHeader& mine) {
    PartHeader header;
    group_->recv(peer, &header, sizeof(header), "all_reduce_sum");
    check_agrees(peer, header, mine.collective, static_cast<DType>(mine.dtype), mine.rows);
    CHECK_MSG(header.columns == mine.columns, "[tp] rank {} all-reduces {} elements, rank 0 {}", peer, header.columns,
              mine.columns);
  }
  static void check_agrees(int peer, const PartHeader& header, Collective collective, DType dtype, int64_t rows) {
    CHECK_MSG(header.collective == collective && header.dtype == static_cast<uint32_t>(dtype) && header.rows == rows,
              "[tp] rank {} is in another collective than rank 0 (collective {}, dtype {}, {} rows)", peer,
              static_cast<uint32_t>(header.collective), header.dtype, header.rows);
  }

  std::shared_ptr<TcpGroup> group_;
};

}  // namespace

std::unique_ptr<Communicator> make_tcp_communicator(std::shared_ptr<TcpGroup> group) {
  return std::make_unique<TcpCommunicator>(std::move(group));
}

}  // namespace pagellm
