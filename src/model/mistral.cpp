// Mistral (MistralForCausalLM): Llama's blocks with a sliding window on every layer when the config
// sets one (hf_config marks the layers; the window reaches the attention op per layer).
#include "model/decoder.h"

namespace pagellm {

Expected<std::unique_ptr<Model>> make_mistral(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend) {
  DecoderSpec spec;
  spec.family = "Mistral";
  return make_decoder(config, spec, checkpoint, backend);
}

}  // namespace pagellm
