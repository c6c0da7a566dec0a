// CPU twin of the Gated DeltaNet ops (spec/models.md B.6-B.11): the short causal conv1d with its
// rolling state, the gated delta rule (recurrent and chunked), and the gated RMSNorm.
//
// Varlen batch and state slots (GdnParams):
//
//   token rows  | seq 0: 5 prefill tokens | seq 1: 1 decode token | seq 2: 64-token chunk ... |
//               ^cu_seqlens_q[0]          ^cu_seqlens_q[1]        ^cu_seqlens_q[2]
//   state slot    state_slots[0]            state_slots[1]          state_slots[2]
//
//   conv_state [num_slots, C, K-1]   (activation dtype): the last K-1 conv inputs of the sequence
//   state      [num_slots, Hv, dk, dv] (f32): S, rows indexed by key dim
//
// Each sequence continues from its slot and leaves its final state there, so a prompt computed in
// chunks over several steps reaches the same state as in one step.
//
// Chunked form (C = 64 rows; the last chunk may be shorter, which equals zero padding), per value
// head, with S the state entering the chunk and gamma = cumsum(g) within the chunk:
//
//   A[t,s] = beta_t (k_t . k_s) exp(gamma_t - gamma_s)            s < t
//   u_t    = beta_t v_t                 - sum_{s<t} A[t,s] u_s     (U = (I + A)^-1 diag(beta) V)
//   w_t    = beta_t exp(gamma_t) k_t    - sum_{s<t} A[t,s] w_s     (W = (I + A)^-1 diag(beta e^gamma) K)
//   v'_t   = u_t - S^T w_t
//   o_t    = exp(gamma_t) S^T q_t + sum_{s<=t} exp(gamma_t - gamma_s) (q_t . k_s) v'_s
//   S     <- exp(gamma_L) S + sum_s exp(gamma_L - gamma_s) k_s v'_s^T
#pragma once

#include "backend/backend.h"

namespace pagellm::cpu {

inline constexpr int kGdnChunkSize = kGdnChunkTokens;

// Shapes and semantics as Backend::gdn_conv1d.
void gdn_conv1d(TensorView out, const TensorView& x, const TensorView& weight, TensorView conv_state,
                const GdnParams& params);

// Shapes and semantics as Backend::gdn_delta_rule.
void gdn_delta_rule(TensorView out, const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& a, const TensorView& b, const TensorView& A_log, const TensorView& dt_bias,
                    TensorView state, const GdnParams& params);

// Shapes and semantics as Backend::gated_rms_norm.
void gated_rms_norm(TensorView out, const TensorView& x, const TensorView& z, const TensorView& w, float eps);

}  // namespace pagellm::cpu
