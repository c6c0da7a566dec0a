// Llama 2 / 3 / 3.1 / 3.2 (LlamaForCausalLM): plain RMSNorm, SwiGLU, rotate-half RoPE (the llama3
// scaling comes from the config), biases only where attention_bias / mlp_bias say so.
#include "model/decoder.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_llama(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend) {
  DecoderSpec spec;
  spec.family = "Llama";
  spec.qkv_bias = spec.o_bias = config.attention_bias;
  spec.mlp_bias = config.mlp_bias;
  return make_decoder(config, spec, checkpoint, backend);
}

}  // namespace pagellm
