#include "model/layers/rotary.h"

#include <algorithm>

#include "model/rope_table.h"

namespace pagellm::layers {

Expected<Rotary> make_rotary(Backend& backend, const RopeConfig& rope, int64_t head_dim) {
  PAGELLM_ASSIGN_OR_RETURN(RopeTable table, make_rope_table(rope, head_dim));
  Tensor host = Tensor::cpu({static_cast<int64_t>(table.inv_freq.size())}, DType::kF32);
  std::copy(table.inv_freq.begin(), table.inv_freq.end(), host.ptr<float>());
  Rotary rotary;
  rotary.inv_freq = backend.alloc(host.shape(), DType::kF32);
  backend.copy(rotary.inv_freq.view(), host.view());
  rotary.attention_scaling = table.attention_scaling;
  return rotary;
}

}  // namespace pagellm::layers
