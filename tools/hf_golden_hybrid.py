#!/usr/bin/env python3
"""Writes golden fixtures for the hybrid Gated DeltaNet models (tests/golden/hybrid/) with transformers.

Cases: a tiny qwen3_5_text (dense MLP, layers [L,L,L,F], partial interleaved M-RoPE) and a tiny
qwen3_next (MoE with shared expert), f32, random weights with every norm weight, A_log and dt_bias
moved away from its init value (so a w vs 1+w mix-up, or a gate bug, cannot hide). expected.json
holds prompt ids, greedy continuations from model.generate (cached state path), top-1 margins, the
next-token logits after each prompt, and, per prompt, the max |difference| between the last-position
logits of one full forward and of a token-by-token forward (transformers' own consistency), and the
greedy continuation by full forwards without a cache (model(prompt + tokens so far) at every step;
`full_forward_greedy_token_ids` with its margins): the model's math with no cache path involved, the
oracle the tests check every token against (generate()'s cached prefill can part from it on a
near-tie, as it does on one qwen3_5 prompt).
Runs on the CPU (pure-torch GDN path, no flash-linear-attention).

Usage: python3 tools/hf_golden_hybrid.py --out tests/golden/hybrid
       (--expected-only: write only expected.json next to the checkpoint it would save, e.g. to
        refresh the expectations of committed fixtures; the weights come from fixed seeds)
"""
import argparse
import json
import math
import os
import traceback

import torch
import transformers

VOCAB = 512
NEW_TOKENS = 16


def randomise(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(0.5, 8.0)))
            elif name.endswith("dt_bias"):
                p.copy_(1.0 + 0.5 * (torch.rand_like(p) * 2 - 1))
            elif "norm" in name:
                p.add_(0.3 * (torch.rand_like(p) * 2 - 1))  # around the init (0 for 1+w norms, 1 for plain)
            else:
                p.normal_(0.0, 0.15)


def qwen35_text(seed):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    config = Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, layer_types=["linear_attention"] * 3 + ["full_attention"],
        rms_norm_eps=1e-6, max_position_embeddings=1024, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    return Qwen3_5ForCausalLM(config)


def qwen3_next(seed):
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    config = Qwen3NextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, full_attention_interval=4, partial_rotary_factor=0.25,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=5e6,
        rms_norm_eps=1e-6, max_position_embeddings=1024, tie_word_embeddings=False,
        eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    return Qwen3NextForCausalLM(config)


def run_case(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0)
        full = model(ids).logits[0, -1].float()
        # token by token through the cache
        step_logits = None
        cache_out = None
        for i in range(len(prompt)):
            kwargs = {"use_cache": True}
            if cache_out is not None:
                kwargs["past_key_values"] = cache_out.past_key_values
            cache_out = model(ids[:, i:i + 1], **kwargs)
            step_logits = cache_out.logits[0, -1].float()
        # greedy by full forwards, no cache
        full_ids = list(prompt)
        full_tokens, full_margins = [], []
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([full_ids]), use_cache=False).logits[0, -1].float()
            top2 = torch.topk(logits, 2)
            full_tokens.append(int(top2.indices[0]))
            full_margins.append(float(top2.values[0] - top2.values[1]))
            full_ids.append(full_tokens[-1])
    tokens = out.sequences[0, len(prompt):].tolist()
    margins = [float(torch.topk(s[0].float(), 2).values.diff().abs()) for s in out.scores]
    return {"prompt_ids": prompt, "greedy_token_ids": tokens, "top1_margins": margins,
            "full_forward_greedy_token_ids": full_tokens, "full_forward_top1_margins": full_margins,
            "prompt_next_token_logits": full.tolist(),
            "hf_full_vs_stepwise_max_abs_diff": float((full - step_logits).abs().max())}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--expected-only", action="store_true")
    args = parser.parse_args()
    builders = [("qwen3_5_text_tiny_f32", qwen35_text), ("qwen3_next_tiny_moe_f32", qwen3_next)]
    for index, (name, build) in enumerate(builders):
        try:
            model = build(3000 + index)
            randomise(model)
            model = model.float().eval()
            folder = os.path.join(args.out, name)
            if args.expected_only:
                os.makedirs(folder, exist_ok=True)
            else:
                model.save_pretrained(folder)
            g = torch.Generator().manual_seed(4000 + index)
            prompts = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (1, 7, 33, 70)]
            cases = [run_case(model, p) for p in prompts]
            with open(os.path.join(folder, "expected.json"), "w") as f:
                json.dump({"made_by": "tools/hf_golden_hybrid.py", "transformers": transformers.__version__,
                           "torch": torch.__version__, "device": "cpu", "dtype": "float32", "cases": cases}, f)
            print(name, "ok; min margin", min(min(c["top1_margins"]) for c in cases),
                  "hf full-vs-stepwise", max(c["hf_full_vs_stepwise_max_abs_diff"] for c in cases))
        except Exception:
            print(name, "FAILED")
            traceback.print_exc()


if __name__ == "__main__":
    main()
