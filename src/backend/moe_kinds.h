// The MoE routing variants (backend.h moe_route), in a header of their own so the CUDA launchers'
// declarations (cuda/moe.h) can name them without backend.h.
#pragma once

namespace pagellm {

// How an MoE router turns one token's logits into its top-k experts and their weights. Ties go to
// the lower expert index.
enum class MoeRouting {
  kSoftmaxTopK,  // Qwen3-MoE / Qwen3-Next: p = softmax over all experts in f32, the k largest p,
                 // weights p (or p / sum of the k, when renormalised)
  kTopKSoftmax,  // gpt-oss: the k largest logits, weights = softmax over those k
};

}  // namespace pagellm
