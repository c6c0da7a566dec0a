#!/usr/bin/env python3
"""Writes the golden fixtures of tests/golden/families/ with Hugging Face transformers: one tiny
random checkpoint per dense family pagellm serves besides Qwen3 (Llama 3 with its llama3 RoPE
scaling, Mistral with a sliding window, Qwen2 with q/k/v biases, Gemma 2 with alternating sliding
layers and both soft-caps, Gemma 3 with 5 local : 1 global layers, per-type RoPE and q/k norms; Qwen3-MoE with sparse and dense layers).

Windows are 8 tokens so the 17- and 64-token prompts (and the 20 generated tokens) cross them;
soft-caps are small enough (attention 10, final 5) that they change the numbers.

Each fixture folder holds the save_pretrained checkpoint and expected.json with, per prompt:
prompt_ids; greedy_token_ids (model.generate, the cached path) and full_forward_greedy_token_ids
(argmax of model(ids) over the whole sequence at every step: the model's math with no cache path in
between, which the tests check every token against); the top-1 margins of both; the next-token
logits after the prompt; and full_forward_top5 (ids, logprobs) at every greedy step.
Runs on the CPU in torch with eager attention (no TF32), so the oracle is deterministic. Matrices
have std 0.15 in f32 and 0.08 in bf16: transformers' eager attention rounds q.k to bf16 before the
softmax, so large scores (a model without q/k norms) put the oracle itself ~3% of the logit range
away from the exact math that pagellm computes in f32.

Usage: python3 tools/hf_golden_families.py --out tests/golden/families
"""
import argparse
import json
import os
import platform

import torch
import transformers

VOCAB = 512
NEW_TOKENS = 20
WINDOW = 8


def common(hidden, layers, heads, kv_heads, head_dim, tie):
    return dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=tie,
                eos_token_id=None, bos_token_id=None, pad_token_id=None)


def llama(tie, rope):
    return transformers.LlamaConfig(rope_parameters=rope, **common(64, 2, 4, 2, 16, tie)), transformers.LlamaForCausalLM


def mistral():
    config = transformers.MistralConfig(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                        sliding_window=WINDOW, **common(64, 2, 4, 1, 16, False))
    return config, transformers.MistralForCausalLM


def qwen2():
    config = transformers.Qwen2Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                      **common(64, 2, 4, 2, 16, True))
    return config, transformers.Qwen2ForCausalLM


def gemma2():
    config = transformers.Gemma2Config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                       sliding_window=WINDOW, attn_logit_softcapping=10.0,
                                       final_logit_softcapping=5.0, query_pre_attn_scalar=24,
                                       hidden_activation="gelu_pytorch_tanh", **common(64, 4, 4, 2, 16, True))
    return config, transformers.Gemma2ForCausalLM


def gemma3():
    rope = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    config = transformers.Gemma3TextConfig(rope_parameters=rope, sliding_window=WINDOW, query_pre_attn_scalar=16,
                                           hidden_activation="gelu_pytorch_tanh", **common(64, 6, 4, 2, 32, True))
    return config, transformers.Gemma3ForCausalLM


def qwen3_moe():
    # 3 layers: sparse, dense (mlp_only_layers), sparse; 8 experts, top 2, renormalised. Short prompts
    # leave some experts without a token in a step.
    config = transformers.Qwen3MoeConfig(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                                         num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                         decoder_sparse_step=1, mlp_only_layers=[1], norm_topk_prob=True,
                                         **common(64, 3, 4, 2, 16, False))
    return config, transformers.Qwen3MoeForCausalLM


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
DEFAULT_ROPE = {"rope_type": "default", "rope_theta": 500000.0}

CASES = [
    ("llama3_untied_f32", torch.float32, lambda: llama(False, LLAMA3_ROPE)),
    ("llama3_tied_bf16", torch.bfloat16, lambda: llama(True, DEFAULT_ROPE)),
    ("mistral_window8_f32", torch.float32, mistral),
    ("qwen2_bias_f32", torch.float32, qwen2),
    ("gemma2_softcap_f32", torch.float32, gemma2),
    ("gemma3_local_global_f32", torch.float32, gemma3),
    ("gemma3_local_global_bf16", torch.bfloat16, gemma3),
    # Appended (seeds follow the list index, so earlier fixtures keep theirs).
    ("mistral_window8_bf16", torch.bfloat16, mistral),
    ("qwen2_bias_bf16", torch.bfloat16, qwen2),
    ("gemma2_softcap_bf16", torch.bfloat16, gemma2),
    ("qwen3_moe_f32", torch.float32, qwen3_moe),
    ("qwen3_moe_bf16", torch.bfloat16, qwen3_moe),
]


def make_model(build, dtype, seed):
    config, cls = build()
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config)
    one_plus = config.model_type.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # (1+w) norms around 0, plain ones around 1: a mix-up cannot hide
                p.copy_((0.0 if one_plus else 1.0) + 0.3 * (torch.rand_like(p) * 2 - 1))
            elif name.endswith("bias"):
                p.normal_(0.0, 0.5)
            else:  # bf16: smaller weights keep q.k small, where transformers' bf16 scores round least
                p.normal_(0.0, 0.15 if dtype == torch.float32 else 0.08)
    return model.to(dtype).eval()


def prompts_for(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in (1, 5, 17, 64)]


def margin(logits):
    top2 = torch.topk(logits.float(), 2).values
    return float(top2[0] - top2[1])


def record(model, prompt):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=0)
        seq = list(prompt)
        full_tokens, full_margins, top5 = [], [], []
        prompt_logits = None
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([seq])).logits[0, -1].float()
            if prompt_logits is None:
                prompt_logits = logits
            token = int(torch.argmax(logits))
            full_tokens.append(token)
            full_margins.append(margin(logits))
            logprobs = torch.log_softmax(logits, dim=-1)
            best = torch.topk(logprobs, 5)
            top5.append({"ids": best.indices.tolist(), "logprobs": best.values.tolist()})
            seq.append(token)
    return {"prompt_ids": prompt, "greedy_token_ids": out.sequences[0, len(prompt):].tolist(),
            "top1_margins": [margin(s[0]) for s in out.scores],
            "full_forward_greedy_token_ids": full_tokens, "full_forward_top1_margins": full_margins,
            "full_forward_top5": top5, "prompt_next_token_logits": prompt_logits.tolist()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated fixture names")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    for index, (name, dtype, build) in enumerate(CASES):
        if only and name not in only:
            continue
        model = make_model(build, dtype, seed=3000 + index)
        folder = os.path.join(args.out, name)
        model.save_pretrained(folder)
        cases = [record(model, prompt) for prompt in prompts_for(4000 + index)]
        expected = {
            "made_by": "tools/hf_golden_families.py",
            "architecture": type(model).__name__,
            "transformers": transformers.__version__, "torch": torch.__version__,
            "device": "cpu", "attn_implementation": "eager", "dtype": str(dtype).replace("torch.", ""),
            "host": platform.machine(),
            "cases": cases,
        }
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f)
        parted = sum(c["greedy_token_ids"] != c["full_forward_greedy_token_ids"] for c in cases)
        print(name, "min margin", min(min(c["full_forward_top1_margins"]) for c in cases),
              "generate vs full forward parted in", parted, "of", len(cases), "prompts")


if __name__ == "__main__":
    main()
