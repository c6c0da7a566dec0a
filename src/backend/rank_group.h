// RankGroup: what the ranks of a tensor-parallel group that live in one process share to meet in a
// collective: each rank's published view and a barrier. publish() puts a rank's view where the others
// see it and returns once every rank has done so; meet() waits for every rank again (after which each
// may overwrite its own buffer).
#pragma once

#include <barrier>
#include <vector>

#include "core/tensor.h"

namespace pagellm {

class RankGroup {
 public:
  explicit RankGroup(int size) : published_(static_cast<size_t>(size)), meeting_(size) {}
  int size() const { return static_cast<int>(published_.size()); }
  const std::vector<TensorView>& published() const { return published_; }
  void publish(int rank, const TensorView& view) {
    published_[static_cast<size_t>(rank)] = view;
    meeting_.arrive_and_wait();
  }
  void meet() { meeting_.arrive_and_wait(); }

 private:
  std::vector<TensorView> published_;
  std::barrier<> meeting_;
};

}  // namespace pagellm
