// Qwen2 / Qwen2.5 (Qwen2ForCausalLM): Llama's blocks with biases on q, k and v (not on o).
#include "model/decoder.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_qwen2(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend) {
  DecoderSpec spec;
  spec.family = "Qwen2";
  spec.qkv_bias = true;
  return make_decoder(config, spec, checkpoint, backend);
}

}  // namespace pagellm
