// Post-processors of tokenizer.json ("post_processor": {...}): add special tokens around the
// encoded ids when add_special_tokens is true (TemplateProcessing, Roberta/Bert, Sequence).
// ByteLevel only trims offsets, which pagellm does not track, so it leaves ids alone.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace pagellm {

class PostProcessor {
 public:
  // Ids before and after the single sequence ("A") in the template.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;

  std::vector<int32_t> apply(std::vector<int32_t> ids) const;
};

// Builds the post-processor; null config gives one that adds nothing.
Expected<PostProcessor> make_post_processor(const nlohmann::json& config);

}  // namespace pagellm
