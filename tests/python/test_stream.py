"""generate_stream yields only what is new; put together it is what generate returns. Stops and
logprobs come back in vLLM's shapes."""

import math

from pagellm import SamplingParams

PROMPTS = ["The capital of France is", "Once upon a time"]


def join_stream(stream):
    """{(request_id, index): [text, token_ids, finish_reason, stop_reason, cumulative_logprob]}, and
    the request ids in the order their last output came."""
    joined = {}
    finished = []
    for out in stream:
        assert len(out.outputs) == 1
        c = out.outputs[0]
        entry = joined.setdefault((out.request_id, c.index), ["", [], None, None, None, out.prompt, out.prompt_token_ids])
        assert entry[2] is None, "an output after the completion finished"
        entry[0] += c.text
        entry[1] += c.token_ids
        entry[2] = c.finish_reason
        entry[3] = c.stop_reason
        entry[4] = c.cumulative_logprob
        if out.finished:
            finished.append(out.request_id)
    return joined, finished


def test_stream_joins_to_generate(chat_llm):
    params = SamplingParams(n=2, temperature=0.9, seed=11, max_tokens=12, logprobs=2)
    whole = chat_llm.generate(PROMPTS, params)
    joined, finished = join_stream(chat_llm.generate_stream(PROMPTS, params))
    request_ids = sorted({rid for rid, _ in joined}, key=int)
    assert len(request_ids) == 2 and sorted(finished, key=int) == request_ids
    for rid, out in zip(request_ids, whole):
        assert len(out.outputs) == 2
        for c in out.outputs:
            text, ids, finish, stop, cumulative, prompt, prompt_ids = joined[(rid, c.index)]
            assert (text, ids, finish, stop) == (c.text, c.token_ids, c.finish_reason, c.stop_reason)
            assert math.isclose(cumulative, c.cumulative_logprob, rel_tol=1e-6)
            assert (prompt, prompt_ids) == (out.prompt, out.prompt_token_ids)
    # n samples of one seeded prompt differ, and the seed makes them reproducible
    assert whole[0].outputs[0].token_ids != whole[0].outputs[1].token_ids
    assert [c.token_ids for c in chat_llm.generate(PROMPTS[0], params)[0].outputs] == [c.token_ids for c in whole[0].outputs]


def test_stream_of_chat(chat_llm):
    messages = [{"role": "user", "content": "Hello"}]
    params = SamplingParams(temperature=0, max_tokens=6)
    joined, _ = join_stream(chat_llm.chat_stream(messages, params))
    (text, ids, *_rest), = joined.values()
    whole = chat_llm.chat(messages, params)[0].outputs[0]
    assert (text, ids) == (whole.text, whole.token_ids)


def test_stop_string_and_stop_token(chat_llm):
    base = chat_llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))[0].outputs[0]
    assert base.finish_reason == "length" and base.stop_reason is None
    stop = base.text[len(base.text) // 2:len(base.text) // 2 + 2]
    assert stop.strip(), f"no usable stop string in {base.text!r}"
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, stop=["never seen", stop])
    cut = chat_llm.generate(PROMPTS[0], params)[0].outputs[0]
    assert cut.text == base.text[:base.text.index(stop)]
    assert (cut.finish_reason, cut.stop_reason) == ("stop", stop)
    joined, _ = join_stream(chat_llm.generate_stream(PROMPTS[0], params))
    (text, _ids, finish, stop_reason, *_rest), = joined.values()
    assert (text, finish, stop_reason) == (cut.text, "stop", stop)

    token = base.token_ids[5]
    by_token = chat_llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True,
                                                            stop_token_ids=[token]))[0].outputs[0]
    assert by_token.token_ids == base.token_ids[:base.token_ids.index(token) + 1]
    assert (by_token.finish_reason, by_token.stop_reason) == ("stop", token)


def test_greedy_logprobs_shape(chat_llm):
    out = chat_llm.generate(PROMPTS[1], SamplingParams(temperature=0, max_tokens=5, logprobs=3, prompt_logprobs=2))[0]
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids) == 5
    for token, step in zip(c.token_ids, c.logprobs):
        assert step[token].rank == 1  # greedy takes the most likely token
        assert len(step) == 3
        assert all(lp.logprob <= 0 for lp in step.values())
        assert step[token].decoded_token == chat_llm.get_tokenizer().decode([token])
    assert math.isclose(c.cumulative_logprob, sum(step[t].logprob for t, step in zip(c.token_ids, c.logprobs)), rel_tol=1e-6)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(out.prompt_token_ids)
    for token, position in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert token in position
    assert chat_llm.generate(PROMPTS[1], SamplingParams(max_tokens=2))[0].outputs[0].cumulative_logprob is None


def test_max_tokens_none_fills_the_context(chat_model_dir):
    from pagellm import LLM

    llm = LLM(model=chat_model_dir, device="cpu", max_model_len=40, kv_cache_memory_bytes=16 << 20)
    out = llm.generate("Hi", SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[0]
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 40
    assert out.outputs[0].finish_reason == "length"
