#include "model/layers/embedding.h"

namespace pagellm::layers {

void TokenEmbedding::forward(Backend& backend, TensorView out, const TensorView& ids) const {
  backend.embedding(out, table, ids);
  if (scale != 1.0f) backend.scale(out, out, scale);
}

void LmHead::forward(Backend& backend, TensorView logits, TensorView last) const {
  final_norm.forward(backend, last, last);
  backend.matmul(logits, last, weight);
  if (final_softcap > 0.0f) backend.softcap(logits, final_softcap);
}

Expected<Tensor> load_head_weight(WeightLoader& loader, const Tensor& embed_tokens, bool tie_word_embeddings,
                                  int64_t vocab, int64_t hidden) {
  if (loader.has("lm_head.weight")) return loader.load("lm_head.weight", {vocab, hidden});
  if (tie_word_embeddings) return embed_tokens;
  return invalid_argument("[checkpoint] tensor 'lm_head.weight' is missing and tie_word_embeddings is false");
}

}  // namespace pagellm::layers
