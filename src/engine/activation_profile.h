// The activation workspace a GPU needs beside the weights and the KV cache, measured rather than
// guessed: before the KV cache is sized, one prefill step of max_num_batched_tokens tokens (the
// largest activations a step can have) runs through a throw-away runner with a cache just big enough
// for it. The model's grow-only activation buffers and the backend's scratch stay allocated
// afterwards, so the free memory read after the step is what the KV cache may take.
#pragma once

#include <cstdint>

#include "engine/engine_config.h"
#include "model/model.h"

namespace pagellm {

struct ActivationProfile {
  int64_t workspace_bytes = 0;    // free memory before the step - free memory after it
  int64_t free_after_bytes = 0;   // what the KV cache budget is taken from
};

// Runs the profile step on `backend` (a GPU; the CPU needs none) and synchronizes.
Expected<ActivationProfile> profile_activations(Model& model, Backend& backend, const EngineConfig& config);

}  // namespace pagellm
