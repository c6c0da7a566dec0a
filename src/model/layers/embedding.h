// The two ends of a decoder: token embedding (with Gemma's sqrt(hidden) scale) and the head (final
// norm, tied or untied vocabulary projection, Gemma 2's final logit soft-cap).
#pragma once

#include <string>

#include "model/layers/norm.h"

namespace pagellm::layers {

struct TokenEmbedding {
  Tensor table;        // [V, H]
  float scale = 1.0f;  // multiplies each row (already rounded to the activation dtype); 1 = off

  // out[T, H] = table[ids] * scale
  void forward(Backend& backend, TensorView out, const TensorView& ids) const;
};

struct LmHead {
  RmsNorm final_norm;        // [H]
  Tensor weight;             // [V, H]; the embedding table when tied
  float final_softcap = 0.0f;  // 0 = off

  // From the residual stream before its last add: last[r] = final_norm(hidden[rows[r]] + delta[rows[r]])
  // in one op (Backend::add_gather_rms_norm; hidden's rows are left unspecified), then
  // logits[R, V] = head(last).
  void forward_rows(Backend& backend, TensorView logits, TensorView last, TensorView hidden, const TensorView& delta,
                    const TensorView& rows) const;
  // logits[R, V] = head(normed[R, H]) (the vocabulary projection and the soft-cap).
  void project(Backend& backend, TensorView logits, const TensorView& normed) const;
};

// lm_head.weight, or the embedding table when the checkpoint has none and ties them (else an error);
// a tensor-parallel rank keeps the vocabulary rows `rows` ([rows.count, hidden]).
Expected<Tensor> load_head_weight(WeightLoader& loader, const Tensor& embed_tokens, bool tie_word_embeddings,
                                  int64_t vocab, int64_t hidden, ShardRange rows);

}  // namespace pagellm::layers
