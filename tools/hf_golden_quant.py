#!/usr/bin/env python3
"""Writes the golden fixtures of tests/golden/quant/: tiny random Qwen3 / Llama / Qwen2 checkpoints
whose projections are quantized here, in Python, into the published formats (block-scaled FP8 as
Hugging Face "fp8" checkpoints store it, AutoAWQ's GEMM layout, GPTQ's v1 layout), and the oracle:
transformers run on the dequantized weights.

Each fixture folder holds config.json (with its quantization_config), the quantized model.safetensors
and expected.json in the format of tools/hf_golden_families.py (greedy tokens, margins, prompt logits,
top-5 logprobs of every greedy step). The f32 fixtures compute in f32 on exactly dequantized weights,
so pagellm must match them as tightly as an unquantized f32 fixture; the bf16 ones run as served.

Widths are chosen so FP8 blocks of 128 end inside a projection (160 = 128 + 32) and fused q|k|v rows
end inside a block; INT4 groups are 32 or 64.

Usage: python3 tools/hf_golden_quant.py --out tests/golden/quant
"""
import argparse
import json
import os
import platform
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_golden_families import prompts_for, record  # noqa: E402

VOCAB = 512
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def common(hidden, heads, kv_heads, head_dim, tie):
    return dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=tie,
                eos_token_id=None, bos_token_id=None, pad_token_id=None)


ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def qwen3(hidden, head_dim):
    return transformers.Qwen3Config(rope_parameters=ROPE, **common(hidden, 4, 2, head_dim, True)), \
        transformers.Qwen3ForCausalLM


def llama(hidden, head_dim):
    return transformers.LlamaConfig(rope_parameters=ROPE, **common(hidden, 4, 2, head_dim, False)), \
        transformers.LlamaForCausalLM


def qwen2(hidden, head_dim):
    return transformers.Qwen2Config(rope_parameters=ROPE, **common(hidden, 4, 2, head_dim, True)), \
        transformers.Qwen2ForCausalLM


# name, format, activation dtype, model, format options
CASES = [
    ("qwen3_fp8_f32", "fp8", torch.float32, lambda: qwen3(160, 40), {"scale_dtype": torch.float32}),
    ("llama3_fp8_bf16", "fp8", torch.bfloat16, lambda: llama(160, 40), {"scale_dtype": torch.bfloat16}),
    ("qwen3_awq_f32", "awq", torch.float32, lambda: qwen3(128, 32), {"group": 32}),
    ("llama3_awq_bf16", "awq", torch.bfloat16, lambda: llama(128, 32), {"group": 64}),
    ("qwen2_gptq_f32", "gptq", torch.float32, lambda: qwen2(128, 32), {"group": 32, "sym": True}),
    ("qwen3_gptq_asym_bf16", "gptq", torch.bfloat16, lambda: qwen3(128, 32), {"group": 32, "sym": False}),
]


# ---- FP8, block-scaled: W = fp8 * scale_inv[n / 128, k / 128]
def quantize_fp8(w, scale_dtype, block=128):
    n, k = w.shape
    rows, cols = -(-n // block), -(-k // block)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    scales = torch.empty(rows, cols, dtype=torch.float32)
    for br in range(rows):
        for bc in range(cols):
            tile = w[br * block:(br + 1) * block, bc * block:(bc + 1) * block].float()
            amax = tile.abs().max().item()
            scale = torch.tensor(amax / 448.0 if amax > 0 else 1.0).to(scale_dtype).float()
            scales[br, bc] = scale
            q[br * block:(br + 1) * block, bc * block:(bc + 1) * block] = \
                (tile / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    dequant = q.float() * scales.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return {"weight": q, "weight_scale_inv": scales.to(scale_dtype)}, dequant


# ---- INT4 groups: W = (q - zero) * scale per group of input channels
def quantize_int4(w, group, sym):
    n, k = w.shape
    x = w.float().reshape(n, k // group, group)
    lo, hi = x.amin(-1).clamp(max=0), x.amax(-1).clamp(min=0)
    if sym:
        amax = torch.maximum(lo.abs(), hi)
        scale = (2 * amax / 15).clamp(min=1e-5).half().float()
        zero = torch.full_like(scale, 8.0)
    else:
        scale = ((hi - lo) / 15).clamp(min=1e-5).half().float()
        zero = torch.round(-lo / scale).clamp(0, 15)
    q = (torch.round(x / scale[..., None]) + zero[..., None]).clamp(0, 15)
    dequant = ((q - zero[..., None]) * scale[..., None]).reshape(n, k)
    return q.reshape(n, k).to(torch.int64), scale, zero.to(torch.int64), dequant


def to_int32(words):
    return torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)


def pack_awq(q, scale, zero):  # AutoAWQ GEMM: qweight [K, N / 8], qzeros [K / g, N / 8], scales [K / g, N]
    return {"qweight": to_int32(pack_cols(q.t().contiguous(), AWQ_ORDER)),
            "qzeros": to_int32(pack_cols(zero.t().contiguous(), AWQ_ORDER)),
            "scales": scale.t().contiguous().half()}


def pack_cols(values, order):
    r, c = values.shape
    out = torch.zeros(r, c // 8, dtype=torch.int64)
    for i, col in enumerate(order):
        out |= values[:, col::8] << (4 * i)
    return out


def pack_gptq(q, scale, zero, group):  # v1: qweight [K / 8, N], qzeros [K / g, N / 8] hold zero - 1
    n, k = q.shape
    qt = q.t().contiguous()  # [K, N]
    words = torch.zeros(k // 8, n, dtype=torch.int64)
    for j in range(8):
        words |= qt[j::8, :] << (4 * j)
    zeros = pack_cols(((zero - 1) & 0xF).t().contiguous(), list(range(8)))
    return {"qweight": to_int32(words), "qzeros": to_int32(zeros), "scales": scale.t().contiguous().half(),
            "g_idx": (torch.arange(k) // group).to(torch.int32)}


def quantize_model(model, fmt, options):
    tensors, quant_config = {}, None
    state = model.state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            prefix = name[:-len(".weight")] if name.endswith(".weight") else None
            if prefix is None or not prefix.endswith(PROJECTIONS):
                tensors[name] = state[name].contiguous()
                continue
            if fmt == "fp8":
                stored, dequant = quantize_fp8(p.detach(), options["scale_dtype"])
            else:
                q, scale, zero, dequant = quantize_int4(p.detach(), options["group"], options.get("sym", False))
                stored = pack_awq(q, scale, zero) if fmt == "awq" else pack_gptq(q, scale, zero, options["group"])
            for key, value in stored.items():
                tensors[f"{prefix}.{key}"] = value.contiguous()
            p.copy_(dequant.to(p.dtype))  # the oracle runs on the dequantized weights
    if model.config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    if fmt == "fp8":
        quant_config = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                        "weight_block_size": [128, 128]}
    elif fmt == "awq":
        quant_config = {"quant_method": "awq", "bits": 4, "group_size": options["group"], "zero_point": True,
                        "version": "gemm"}
    else:
        quant_config = {"quant_method": "gptq", "bits": 4, "group_size": options["group"], "sym": options["sym"],
                        "desc_act": False, "checkpoint_format": "gptq"}
    return tensors, quant_config


def make_model(build, dtype, seed):
    config, cls = build()
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * (torch.rand_like(p) * 2 - 1))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.15 if dtype == torch.float32 else 0.08)
    return model.to(dtype).eval()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated fixture names")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    for index, (name, fmt, dtype, build, options) in enumerate(CASES):
        if only and name not in only:
            continue
        model = make_model(build, dtype, seed=5000 + index)
        tensors, quant_config = quantize_model(model, fmt, options)
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config["architectures"] = [type(model).__name__]
        config.pop("torch_dtype", None)
        config["dtype"] = str(dtype).replace("torch.", "")
        config["quantization_config"] = quant_config
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        cases = [record(model, prompt) for prompt in prompts_for(6000 + index)]
        expected = {
            "made_by": "tools/hf_golden_quant.py",
            "architecture": type(model).__name__, "format": fmt,
            "transformers": transformers.__version__, "torch": torch.__version__,
            "device": "cpu", "attn_implementation": "eager", "dtype": str(dtype).replace("torch.", ""),
            "host": platform.machine(),
            "cases": cases,
        }
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f)
        print(name, "min margin", min(min(c["full_forward_top1_margins"]) for c in cases))


if __name__ == "__main__":
    main()
