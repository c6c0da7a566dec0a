"""LLM.generate gives the greedy tokens of `pagellm generate --output json` on the transformers
fixtures of tests/golden, for each prompt alone and for all of a fixture's prompts in one batch."""

import json

import pytest

from conftest import golden_fixture, run_cli
from pagellm import LLM, SamplingParams

KV_CACHE_BYTES = 32 << 20

FIXTURES = [
    "qwen3/tied_gqa2_hd32_f32",
    "qwen3/untied_gqa8_hd16_bf16",
    "families/llama3_tied_bf16",
    "families/gemma3_local_global_f32",
]


def read_cases(fixture_dir):
    cases = json.loads((fixture_dir / "expected.json").read_text())["cases"]
    return [(case["prompt_ids"], len(case["greedy_token_ids"])) for case in cases]


def cli_greedy(cli, fixture_dir, prompt_ids, max_tokens):
    out = run_cli(cli, "generate", "--model", str(fixture_dir), "--device", "cpu", "--prompt-ids",
                  ",".join(map(str, prompt_ids)), "--max-tokens", str(max_tokens), "--output", "json", "--kv-cache-memory", str(KV_CACHE_BYTES))
    item = json.loads(out)["outputs"][0]
    return item["token_ids"], item["finish_reason"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_generate_matches_cli_alone_and_batched(cli, fixture):
    fixture_dir = golden_fixture(fixture)
    cases = read_cases(fixture_dir)
    max_tokens = max(n for _, n in cases)
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    llm = LLM(model=str(fixture_dir), device="cpu", kv_cache_memory_bytes=KV_CACHE_BYTES)
    batched = llm.generate([{"prompt_token_ids": ids} for ids, _ in cases], params)
    assert len(batched) == len(cases)
    for (ids, _), together in zip(cases, batched):
        alone = llm.generate({"prompt_token_ids": ids}, params)[0]
        want_ids, want_finish = cli_greedy(cli, fixture_dir, ids, max_tokens)
        assert together.prompt_token_ids == ids
        assert alone.outputs[0].token_ids == want_ids
        assert together.outputs[0].token_ids == want_ids
        assert together.outputs[0].finish_reason == want_finish
        assert together.finished and len(together.outputs) == 1 and together.outputs[0].index == 0
        assert together.prompt is None  # token-id prompts have no text


def test_generate_agrees_with_transformers(cli):
    """The CLI comparison above is anchored to the oracle: transformers' own greedy tokens."""
    fixture_dir = golden_fixture("qwen3/tied_gqa2_hd32_f32")
    cases = json.loads((fixture_dir / "expected.json").read_text())["cases"]
    llm = LLM(model=str(fixture_dir), device="cpu", kv_cache_memory_bytes=KV_CACHE_BYTES)
    outs = llm.generate([{"prompt_token_ids": c["prompt_ids"]} for c in cases],
                        [SamplingParams(temperature=0, max_tokens=len(c["greedy_token_ids"])) for c in cases])
    assert [o.outputs[0].token_ids for o in outs] == [c["greedy_token_ids"] for c in cases]
