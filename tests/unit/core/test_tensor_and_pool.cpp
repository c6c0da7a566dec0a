#include <atomic>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace pagellm {
namespace {

TEST(Tensor, ContiguousViewsAndSlices) {
  Tensor t = Tensor::cpu({3, 4}, DType::kF32);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.view().strides[0], 4);
  float* p = t.ptr<float>();
  std::iota(p, p + 12, 0.0f);
  TensorView rows = t.view().slice_rows(1, 3);
  EXPECT_EQ(rows.shape, (Shape{2, 4}));
  EXPECT_EQ(rows.ptr<float>()[0], 4.0f);
  TensorView flat = t.view().reshape({12});
  EXPECT_EQ(flat.ptr<float>()[11], 11.0f);
  EXPECT_EQ(t.shape().to_string(), "[3, 4]");
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t count : {1, 2, 3, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
    pool.parallel_for(count, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

Expected<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("[test] value must be > 0, got {}", v);
  return v;
}

Status use_it(int v, int* out) {
  PAGELLM_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x * 2;
  return Status::ok();
}

TEST(Status, ExpectedCarriesValueOrError) {
  int out = 0;
  EXPECT_TRUE(use_it(3, &out).is_ok());
  EXPECT_EQ(out, 6);
  Status st = use_it(-5, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "[test] value must be > 0, got -5");
}

}  // namespace
}  // namespace pagellm
