#!/usr/bin/env python3
"""Writes the gpt-oss golden fixtures of tests/golden/families/ with Hugging Face transformers: a tiny
random GptOssForCausalLM whose features all change the numbers:

- 4 layers alternating sliding (window 8) and full attention, so the 17- and 64-token prompts cross
  the window;
- attention sinks (one logit per head, std 1 around 0.5) and q/k/v/o biases;
- YaRN RoPE as gpt-oss configures it (factor 32, beta 32 / 1, truncate false) with
  original_max_position_embeddings 64, so the ramp has low, mixed and high bands at head_dim 16;
- hidden 64, expert width 96, 4 experts, top 2, router with bias, experts with biases; expert gate/up weights of std 0.4 so the
  clamped SwiGLU's clamps (limit 7) are reached.

Fixtures: gpt_oss_f32, gpt_oss_bf16 (bf16 expert weights as save_pretrained writes them) and
gpt_oss_mxfp4_{f32,bf16}: the expert weights drawn as MXFP4 (random e2m1 nibbles, e8m0 scales per
32 inputs), the checkpoint written in the released layout (`*_blocks` U8 [E, N, K/32, 16], `*_scales`
U8 [E, N, K/32], quantization_config mxfp4 with modules_to_not_convert) and transformers run on the
weights its own `convert_moe_packed_tensors` dequantizes from them.

expected.json as tools/hf_golden_families.py writes it (the tests check the full-forward tokens).
Usage: python3 tools/hf_golden_gptoss.py --out tests/golden/families
"""
import argparse
import json
import os
import platform
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden_families import VOCAB, prompts_for, record  # noqa: E402

WINDOW = 8
QUANTIZATION_CONFIG = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                               "lm_head"],
}


def gpt_oss_config():
    rope = {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
            "truncate": False, "original_max_position_embeddings": 64}
    config = transformers.GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=1024, rms_norm_eps=1e-5,
        tie_word_embeddings=False, rope_parameters=rope, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    config._attn_implementation = "eager"
    return config


def fill(model, dtype):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * (torch.rand_like(p) * 2 - 1))
            elif name.endswith("sinks"):
                p.normal_(0.5, 1.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            elif "experts.gate_up_proj" in name:
                p.normal_(0.0, 0.4 if dtype == torch.float32 else 0.2)
            else:
                p.normal_(0.0, 0.15 if dtype == torch.float32 else 0.08)


# ---- MXFP4 (the layout of the released checkpoints and of transformers' integrations/mxfp4.py)

def random_mxfp4(num_experts, rows, cols, g):
    """blocks [E, rows, cols/32, 16] u8, scales [E, rows, cols/32] u8 (e8m0, bias 127)."""
    blocks = torch.randint(0, 256, (num_experts, rows, cols // 32, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(123, 126, (num_experts, rows, cols // 32), generator=g, dtype=torch.int32).to(torch.uint8)
    return blocks, scales


def dequantize_mxfp4(blocks, scales):
    """transformers' own dequantization: [E, rows, cols] -> transposed [E, cols, rows] (bf16)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    return convert_moe_packed_tensors(blocks, scales).cpu()


def own_dequantize(blocks, scales):
    """The same from the format's definition (low nibble first, e2m1 table, 2^(scale - 127)), untransposed."""
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
    lo = table[(blocks & 0x0F).long()]
    hi = table[(blocks >> 4).long()]
    values = torch.stack([lo, hi], dim=-1).reshape(*blocks.shape[:-1], 32)
    values = values * torch.pow(2.0, scales.float() - 127.0).unsqueeze(-1)
    return values.reshape(*blocks.shape[:-2], -1)


def quantize_experts(model, seed):
    """Replaces every expert matrix by random MXFP4 values; returns {checkpoint name: tensor}."""
    g = torch.Generator().manual_seed(seed)
    packed = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not (name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj")):
                continue
            # The checkpoint stores [E, out, in/32, 16]; transformers' dequantize returns [E, in, out].
            out_features = 2 * model.config.intermediate_size if "gate_up" in name else model.config.hidden_size
            e = p.shape[0]
            in_features = p.shape[1] if p.shape[2] == out_features else p.shape[2]
            blocks, scales = random_mxfp4(e, out_features, in_features, g)
            dense = dequantize_mxfp4(blocks, scales)
            own = own_dequantize(blocks, scales).transpose(1, 2)
            assert torch.equal(dense.float(), own), name + ": transformers' dequantize differs from the definition"
            if p.shape[1] == out_features:  # a layout holding [E, out, in]
                dense = dense.transpose(1, 2)
            print("  ", name, "parameter", list(p.shape), "blocks", list(blocks.shape))
            p.copy_(dense.to(p.dtype))
            packed[name + "_blocks"] = blocks
            packed[name + "_scales"] = scales
    return packed


def write_mxfp4_checkpoint(folder, packed):
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for name in list(tensors):
        if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            del tensors[name]
    tensors.update(packed)
    save_file(tensors, path, metadata={"format": "pt"})
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["quantization_config"] = QUANTIZATION_CONFIG
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)


def check_transformers_loads(folder, model, dtype):
    """transformers' own loader on the written MXFP4 checkpoint (dequantize=True) must give the same logits."""
    try:
        loaded = transformers.GptOssForCausalLM.from_pretrained(
            folder, dtype=dtype, quantization_config=transformers.Mxfp4Config(dequantize=True)).eval()
        loaded.config._attn_implementation = "eager"
        ids = torch.tensor([prompts_for(1)[3]])
        with torch.no_grad():
            a, b = model(ids).logits.float(), loaded(ids).logits.float()
        print("  transformers from_pretrained(dequantize=True) max |logit diff|:", float((a - b).abs().max()))
    except Exception:  # reported, not fatal: the fixture is defined by the in-memory model
        print("  transformers could not load the MXFP4 folder:")
        traceback.print_exc()


CASES = [
    ("gpt_oss_f32", torch.float32, False),
    ("gpt_oss_bf16", torch.bfloat16, False),
    ("gpt_oss_mxfp4_f32", torch.float32, True),
    ("gpt_oss_mxfp4_bf16", torch.bfloat16, True),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated fixture names")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    for index, (name, dtype, mxfp4) in enumerate(CASES):
        if only and name not in only:
            continue
        try:
            torch.manual_seed(5000 + index)
            model = transformers.GptOssForCausalLM(gpt_oss_config())
            fill(model, dtype)
            model = model.to(dtype).eval()
            packed = quantize_experts(model, 5500 + index) if mxfp4 else None
            folder = os.path.join(args.out, name)
            model.save_pretrained(folder)
            if mxfp4:
                write_mxfp4_checkpoint(folder, packed)
            for key, t in sorted(load_file(os.path.join(folder, "model.safetensors")).items()):
                if key.startswith("model.layers.0.") or not key.startswith("model.layers."):
                    print("  ", key, list(t.shape), t.dtype)
            cases = [record(model, prompt) for prompt in prompts_for(6000 + index)]
            expected = {
                "made_by": "tools/hf_golden_gptoss.py", "architecture": type(model).__name__,
                "transformers": transformers.__version__, "torch": torch.__version__, "device": "cpu",
                "attn_implementation": "eager", "dtype": str(dtype).replace("torch.", ""),
                "host": platform.machine(), "mxfp4_experts": mxfp4, "cases": cases,
            }
            with open(os.path.join(folder, "expected.json"), "w") as f:
                json.dump(expected, f)
            if mxfp4:
                check_transformers_loads(folder, model, dtype)
            parted = sum(c["greedy_token_ids"] != c["full_forward_greedy_token_ids"] for c in cases)
            print(name, "min margin", min(min(c["full_forward_top1_margins"]) for c in cases),
                  "generate vs full forward parted in", parted, "of", len(cases), "prompts", flush=True)
        except Exception:
            print(name, "FAILED")
            traceback.print_exc()


if __name__ == "__main__":
    main()
