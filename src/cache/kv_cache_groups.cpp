#include "cache/kv_cache_groups.h"

#include <algorithm>
#include <map>

#include "core/check.h"

namespace pagellm {

KvCacheGroups make_kv_cache_groups(std::span<const int32_t> layer_windows) {
  KvCacheGroups groups;
  if (layer_windows.empty()) return groups;
  // Kinds ordered full first, then by window: std::map on the window with kFullAttention = -1 first.
  std::map<int32_t, std::vector<int32_t>> layers_of_kind;  // window -> attention-layer ordinals
  for (size_t i = 0; i < layer_windows.size(); ++i) {
    const int32_t window = layer_windows[i];
    CHECK_MSG(window == kFullAttention || window > 0, "[kv cache] layer {} has window {}", i, window);
    layers_of_kind[window].push_back(static_cast<int32_t>(i));
  }
  size_t smallest = layer_windows.size();
  for (const auto& [window, layers] : layers_of_kind) smallest = std::min(smallest, layers.size());
  groups.layers_per_group = static_cast<int32_t>(smallest);
  groups.layers.resize(layer_windows.size());
  for (const auto& [window, layers] : layers_of_kind) {
    for (size_t k = 0; k < layers.size(); ++k) {
      if (k % smallest == 0) groups.windows.push_back(window);
      groups.layers[static_cast<size_t>(layers[k])] = {groups.num_groups() - 1, static_cast<int32_t>(k % smallest)};
    }
  }
  return groups;
}

KvCacheGroups kv_cache_groups_of(const MemorySpec& spec) {
  if (spec.num_attention_layers == 0) return KvCacheGroups{{kFullAttention}, 0, {}};
  std::vector<int32_t> windows = spec.attention_windows;
  if (windows.empty()) windows.assign(static_cast<size_t>(spec.num_attention_layers), kFullAttention);
  CHECK_MSG(static_cast<int64_t>(windows.size()) == spec.num_attention_layers,
            "[kv cache] {} attention windows for {} attention layers", windows.size(), spec.num_attention_layers);
  return make_kv_cache_groups(windows);
}

}  // namespace pagellm
