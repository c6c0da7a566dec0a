"""Bad parameters are refused with clear errors before anything runs: ValueError for values,
TypeError for unknown keywords (as Python and vLLM do)."""

import pytest

from conftest import golden_fixture
from pagellm import LLM, SamplingParams


def test_vllm_defaults():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.max_tokens, p.seed) == (1, 1.0, 1.0, 0, 0.0, 16, None)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.stop, p.stop_token_ids, p.ignore_eos, p.logprobs, p.skip_special_tokens) == ([], [], False, None, True)
    assert SamplingParams(stop="x").stop == ["x"]


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": -0.5}, r"temperature must be >= 0, got -0.5"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
    ({"top_k": -2}, r"top_k must be -1, 0 or positive, got -2"),
    ({"min_p": 2.0}, r"min_p must be in \[0, 1\]"),
    ({"max_tokens": 0}, r"max_tokens must be >= 1, got 0"),
    ({"min_tokens": 5, "max_tokens": 2}, r"min_tokens must be in \[0, max_tokens=2\], got 5"),
    ({"presence_penalty": 3.0}, r"presence_penalty must be in \[-2, 2\]"),
    ({"frequency_penalty": -2.5}, r"frequency_penalty must be in \[-2, 2\]"),
    ({"repetition_penalty": 0.0}, r"repetition_penalty must be in"),
    ({"logprobs": -1}, r"logprobs must be >= 0, got -1"),
    ({"prompt_logprobs": 21}, r"prompt_logprobs must be in \[0, 20\], got 21"),
    ({"n": 0}, r"n must be an integer >= 1, got 0"),
    ({"temperature": "hot"}, r"temperature must be a number, got 'hot'"),
    ({"top_k": 2.5}, r"top_k must be an integer, got 2.5"),
    ({"stop": ["ok", 3]}, r"stop must be a string or a list of strings"),
    ({"stop_token_ids": ["x"]}, r"stop_token_ids must be a list of token ids"),
    ({"stop_token_ids": 7}, r"stop_token_ids must be a list of token ids"),
    ({"logit_bias": {"x": 1.0}}, r"logit_bias must map token ids to numbers"),
    ({"seed": -1}, r"seed must be in \[0, 2\*\*64\)"),
    ({"max_tokens": 1.5}, r"max_tokens must be an integer or None"),
])
def test_bad_values_are_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="best_of_three"):
        SamplingParams(best_of_three=2)


def test_llm_keyword_errors():
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_num_sequences'"):
        LLM(model="unused", max_num_sequences=4)
    with pytest.raises(NotImplementedError, match="tensor_parallel_size=2"):
        LLM(model="unused", tensor_parallel_size=2)
    with pytest.raises(ValueError, match="tensor_parallel_size must be an integer >= 1"):
        LLM(model="unused", tensor_parallel_size=0)
    with pytest.raises(FileNotFoundError, match="no-such-model-folder"):
        LLM(model="/no-such-model-folder")


@pytest.fixture(scope="module")
def tiny_llm():
    return LLM(model=str(golden_fixture("qwen3/tied_gqa2_hd32_f32")), device="cpu", max_model_len=64,
               max_num_seqs=4, enable_prefix_caching=False, seed=5, kv_cache_memory_bytes=16 << 20)


def test_engine_args_reach_the_engine(tiny_llm):
    assert tiny_llm._engine.max_model_len == 64
    with pytest.raises(ValueError, match="max-num-seqs"):
        LLM(model=str(golden_fixture("qwen3/tied_gqa2_hd32_f32")), max_num_seqs="many")
    with pytest.raises(ValueError, match="kv-cache-dtype 'fp4'"):
        LLM(model=str(golden_fixture("qwen3/tied_gqa2_hd32_f32")), device="cpu", kv_cache_dtype="fp4")


def test_requests_the_engine_refuses_are_value_errors(tiny_llm):
    with pytest.raises(ValueError, match="exceeds max_model_len 64"):
        tiny_llm.generate({"prompt_token_ids": [1] * 60}, SamplingParams(max_tokens=10))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tiny_llm.generate({"prompt_token_ids": [10**6]}, SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="prompt 1: .*the prompt is empty"):
        tiny_llm.generate([{"prompt_token_ids": [1]}, {"prompt_token_ids": []}], SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="has no tokenizer"):
        tiny_llm.generate("text needs a tokenizer", SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="2 sampling params for 1 prompts"):
        tiny_llm.generate({"prompt_token_ids": [1]}, [SamplingParams(), SamplingParams()])
    with pytest.raises(TypeError, match="prompt 0 must be a str or a dict"):
        tiny_llm.generate([5], SamplingParams())
    assert tiny_llm.generate([], SamplingParams()) == []
    assert tiny_llm._engine.is_idle_and_leak_free()
    # and the engine still answers
    assert len(tiny_llm.generate({"prompt_token_ids": [1, 2]}, SamplingParams(max_tokens=3))[0].outputs[0].token_ids) == 3
