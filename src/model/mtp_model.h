// MtpModel: a checkpoint's multi-token-prediction head (Qwen3.5 / Qwen3-Next `mtp.*`) as a Model the
// draft runner drives (engine/mtp_proposer.h). Besides each token row's id, its forward reads one
// hidden state per row: row t pairs token t_(p+1) with the hidden state h_p at position p, and the
// logits there predict t_(p+2) (vLLM's qwen3_next_mtp / qwen3_5_mtp):
//
//   x = fc([ norm_embedding(embed(t_(p+1))) | norm_hidden(h_p) ])      fc [H, 2H], norms (1 + w)
//   x = one gated full-attention decoder layer (MLP or MoE) at position p, over the head's own paged KV
//   logits = head(norm(x))                                             embedding and head: the target's
//
// h_p is the target's hidden state after its final norm (target_hidden_states(T), kept for every token
// row of the target's last forward once the head is loaded), or for k > 1 the head's own norm(x) of
// the draft before (hidden_states()): the head runs autoregressively on its outputs.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace pagellm {

class MtpModel : public Model {
 public:
  // The hidden input of the next forward: its token row t reads source[rows[t]] (source [*, H] and
  // rows [T] i32 on the device; source may be hidden_states() of the forward before).
  virtual void set_hidden_input(const TensorView& source, const TensorView& rows) = 0;
  // [num_tokens, H]: the target's final-norm hidden state of the first num_tokens token rows of its
  // last forward (a decode graph's replay leaves them too).
  virtual TensorView target_hidden_states(int64_t num_tokens) const = 0;
  // [T, H]: norm(x) of every token row of this head's last forward.
  virtual TensorView hidden_states() const = 0;
  // The head never syncs with the host, but its rows are not decode graphs' shapes.
  bool is_graph_capturable() const override { return false; }
};

// The MTP head of `target` (loaded from model_dir on `backend`): an error naming why not (a family
// without one in pagellm, a tensor-parallel target, a checkpoint without mtp.* weights). The target
// must outlive the head, which keeps its final hidden states from then on.
Expected<std::unique_ptr<MtpModel>> load_mtp_model(Model& target, const std::string& model_dir, Backend& backend);

}  // namespace pagellm
