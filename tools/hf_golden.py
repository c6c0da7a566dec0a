#!/usr/bin/env python3
"""Writes the Qwen3 golden fixtures of tests/golden/qwen3/ with Hugging Face transformers.

Each case is a tiny Qwen3 checkpoint with random weights (matrices std 0.15 so greedy choices have
clear margins, norm weights random around 1 so a plain-vs-(1+w) mix-up shows), saved with
save_pretrained, plus expected.json: prompt ids, the greedy continuation from model.generate (KV
cache path), the top-1 margin of every greedy step, and the next-token logits after each prompt.
Runs on the CPU in torch (no TF32, eager attention) so the oracle is deterministic.

Usage: python3 tools/hf_golden.py --out tests/golden/qwen3
"""
import argparse
import json
import os
import platform

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

CASES = [
    # name, dtype, tie, heads, kv_heads, head_dim, hidden, layers
    ("tied_gqa2_hd32_f32", torch.float32, True, 4, 2, 32, 64, 2),      # head_dim != hidden / heads
    ("untied_gqa1_hd16_f32", torch.float32, False, 4, 4, 16, 64, 3),   # MHA, head_dim == hidden / heads
    ("tied_gqa8_hd32_f32", torch.float32, True, 8, 1, 32, 128, 2),     # 8 query heads per kv head
    ("tied_gqa2_hd32_bf16", torch.bfloat16, True, 4, 2, 32, 64, 2),
    ("untied_gqa8_hd16_bf16", torch.bfloat16, False, 8, 1, 16, 96, 2),
]
VOCAB = 512
NEW_TOKENS = 20


def make_model(dtype, tie, heads, kv_heads, head_dim, hidden, layers, seed):
    common = dict(
        vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=tie,
        eos_token_id=None, bos_token_id=None, pad_token_id=None)
    try:  # transformers v5 form
        config = Qwen3Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, **common)
    except TypeError:  # v4 form
        config = Qwen3Config(rope_theta=10000.0, **common)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * (torch.rand_like(p) * 2 - 1))
            else:
                p.normal_(0.0, 0.15)
    return model.to(dtype).eval()


def prompts_for(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 5, 17, 64]
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]


def greedy(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0)
        prompt_logits = model(ids).logits[0, -1].float()
    tokens = out.sequences[0, len(prompt):].tolist()
    margins = []
    for score in out.scores:
        top2 = torch.topk(score[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    return tokens, margins, prompt_logits.tolist()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    for index, (name, dtype, tie, heads, kv_heads, head_dim, hidden, layers) in enumerate(CASES):
        model = make_model(dtype, tie, heads, kv_heads, head_dim, hidden, layers, seed=1000 + index)
        folder = os.path.join(args.out, name)
        model.save_pretrained(folder)
        cases = []
        for prompt in prompts_for(2000 + index):
            tokens, margins, logits = greedy(model, prompt)
            cases.append({"prompt_ids": prompt, "greedy_token_ids": tokens, "top1_margins": margins,
                          "prompt_next_token_logits": logits})
        expected = {
            "made_by": "tools/hf_golden.py",
            "transformers": transformers.__version__, "torch": torch.__version__,
            "device": "cpu", "attn_implementation": "eager", "dtype": str(dtype).replace("torch.", ""),
            "host": platform.machine(),
            "cases": cases,
        }
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, "min margin", min(min(c["top1_margins"]) for c in cases))


if __name__ == "__main__":
    main()
