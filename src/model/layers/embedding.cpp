#include "model/layers/embedding.h"

namespace pagellm::layers {

void TokenEmbedding::forward(Backend& backend, TensorView out, const TensorView& ids) const {
  backend.embedding(out, table, ids);
  if (scale != 1.0f) backend.scale(out, out, scale);
}

void LmHead::forward_rows(Backend& backend, TensorView logits, TensorView last, TensorView hidden,
                          const TensorView& delta, const TensorView& rows) const {
  backend.add_gather_rms_norm(last, hidden, delta, rows, final_norm.weight, final_norm.eps, final_norm.mode);
  project(backend, logits, last);
}

void LmHead::project(Backend& backend, TensorView logits, const TensorView& normed) const {
  backend.matmul(logits, normed, weight);
  if (final_softcap > 0.0f) backend.softcap(logits, final_softcap);
}

Expected<Tensor> load_head_weight(WeightLoader& loader, const Tensor& embed_tokens, bool tie_word_embeddings,
                                  int64_t vocab, int64_t hidden, ShardRange rows) {
  const bool whole = rows.begin == 0 && rows.count == vocab;
  if (loader.has("lm_head.weight"))
    return loader.load_rows({"lm_head.weight"}, {{vocab, hidden}},
                            whole ? std::vector<TensorSlice>{} : std::vector<TensorSlice>{{rows.begin, rows.count, 0, -1}});
  if (tie_word_embeddings && whole) return embed_tokens;
  if (tie_word_embeddings)  // the rows of the table, which stays alive as long as the head does
    return Tensor(embed_tokens.view().slice_rows(rows.begin, rows.begin + rows.count),
                  std::make_shared<Tensor>(embed_tokens));
  return invalid_argument("[checkpoint] tensor 'lm_head.weight' is missing and tie_word_embeddings is false");
}

}  // namespace pagellm::layers
