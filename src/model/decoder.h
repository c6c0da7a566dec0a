// Decoder: the dense decoder-only transformer that Llama, Mistral, Qwen2, Qwen3 and Gemma 2/3 share,
// built from the layers room (model/layers/). A family file only fills a DecoderSpec from its config.
//
//   hidden = embed(ids) [* sqrt(H)]
//   per layer:  x = input_norm(hidden) ─ attention ─ [post_attention_norm] ─ hidden += ·
//               x = pre_ffn_norm(hidden) ─ gated MLP or sparse MoE ─ [post_ffn_norm] ─ hidden += ·
//   logits = lm_head(final_norm(hidden[rows that sample])) [soft-capped]
// (Llama names its pre-FFN norm post_attention_layernorm; Gemma's sandwich has all four.)
#pragma once

#include <memory>
#include <string>

#include "io/safetensors.h"
#include "model/model.h"
#include "model/moe_ffn.h"

namespace pagellm {

struct DecoderSpec {
  std::string family;           // for messages: "Llama", "Gemma 3", ...
  std::string weight_prefix = "model.";  // embed_tokens, layers.*, norm live under it
  NormWeight norm_mode = NormWeight::kPlain;  // every RMSNorm of the model
  bool qk_norm = false;         // per-head q/k RMSNorm before RoPE (Qwen3, Gemma 3)
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  bool sandwich_norms = false;  // norms after attention and after the MLP too (Gemma)
  bool scale_embeddings = false;  // embeddings * sqrt(hidden), the scalar in the activation dtype (Gemma)
  float attention_scale = 0.0f;   // 0: head_dim^-0.5
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  // Sparse MoE FFNs (model/moe_ffn.h) on the layers the config picks: num_experts > 0, every
  // decoder_sparse_step-th layer, not in mlp_only_layers (Qwen3-MoE); a MoE model's steps route on
  // the host, so it runs without CUDA graphs.
  bool moe = false;
  MoeStyle moe_style = MoeStyle::kQwen;
  bool attention_sinks = false;  // self_attn.sinks [nH] (gpt-oss)
};

// Checks the config fields every dense family reads (heads, head_dim, layer types, activation) and
// loads the checkpoint.
Expected<std::unique_ptr<Model>> make_decoder(const ModelConfig& config, const DecoderSpec& spec,
                                              const Checkpoint& checkpoint, Backend& backend);

// The family factories (one short file each: llama.cpp, mistral.cpp, qwen2.cpp, qwen3.cpp, gemma.cpp, gpt_oss.cpp).
Expected<std::unique_ptr<Model>> make_llama(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend);
Expected<std::unique_ptr<Model>> make_mistral(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend);
Expected<std::unique_ptr<Model>> make_qwen2(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend);
Expected<std::unique_ptr<Model>> make_gemma2(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend);
Expected<std::unique_ptr<Model>> make_qwen3_moe(const ModelConfig& config, const Checkpoint& checkpoint,
                                                Backend& backend);
Expected<std::unique_ptr<Model>> make_gpt_oss(const ModelConfig& config, const Checkpoint& checkpoint,
                                              Backend& backend);
Expected<std::unique_ptr<Model>> make_gemma3(const ModelConfig& config, const Checkpoint& checkpoint,
                                             Backend& backend);

}  // namespace pagellm
