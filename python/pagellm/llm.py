"""LLM: vLLM's offline API (``from vllm import LLM, SamplingParams``) over pagellm's engine."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

from pagellm import _pagellm
from pagellm.outputs import CompletionOutput, Logprob, PromptLogprobs, RequestOutput, SampleLogprobs
from pagellm.sampling_params import SamplingParams
from pagellm.tokenizer import Tokenizer, render_chat

# How long a wait on the engine lasts before Python runs again (and sees Ctrl-C).
_POLL_MS = 50
# How long an abort waits for the engine to end its requests (one engine step, normally).
_ABORT_WAIT_S = 30.0

PromptType = Union[str, dict[str, Any]]


@dataclass
class _Prompt:
    text: Optional[str]
    token_ids: list[int]


@dataclass
class _Choice:
    """One engine request: completion `choice` of prompt `prompt`."""

    prompt: int
    choice: int


class _Submission:
    """The engine requests of one call and how their outputs map back onto prompts and choices."""

    def __init__(self, llm: "LLM", prompts: list[_Prompt], params: list[SamplingParams]) -> None:
        self.prompts = prompts
        self.params = params
        self.request_ids = [str(next(llm._request_counter)) for _ in prompts]
        self.choices: list[_Choice] = []
        requests = []
        for index, (prompt, p) in enumerate(zip(prompts, params)):
            max_tokens = p.max_tokens if p.max_tokens is not None else max(1, llm._engine.max_model_len - len(prompt.token_ids))
            for choice in range(p.n):
                request = _pagellm.GenerateRequest()
                request.prompt_token_ids = prompt.token_ids
                # n samples of one seeded prompt differ from each other yet are reproducible (as the server).
                request.sampling = p.to_engine(max_tokens, seed_offset=choice)
                request.stop_strings = p.stop
                request.skip_special_tokens = p.skip_special_tokens
                request.include_stop_string = p.include_stop_str_in_output
                requests.append(request)
                self.choices.append(_Choice(index, choice))
        self.batch = llm._engine.submit(requests) if requests else None


class LLM:
    """A model loaded into pagellm's engine, for offline batches (vLLM's ``LLM``).

    ``model`` is a folder or a Hugging Face repo id in the local cache (pagellm never downloads).
    Engine keywords are those of ``pagellm serve``'s flags in Python spelling: ``device`` ("auto",
    "cpu", "cuda"), ``dtype``, ``seed``, ``max_model_len``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``block_size``, ``enable_prefix_caching``, ``quantization``,
    ``kv_cache_dtype``, ``kv_cache_memory_bytes``, ``gpu_memory_utilization``, ``tokenizer``,
    ``async_scheduling``, ...; an unknown keyword is a TypeError naming it.
    """

    def __init__(
        self,
        model: Union[str, os.PathLike],
        *,
        tensor_parallel_size: int = 1,
        revision: Optional[str] = None,
        trust_remote_code: bool = False,  # accepted for vLLM scripts: pagellm runs no code from a checkpoint
        **engine_args: Any,
    ) -> None:
        if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be an integer >= 1, got {tensor_parallel_size!r}")
        if tensor_parallel_size > 1:
            raise NotImplementedError(
                f"tensor_parallel_size={tensor_parallel_size}: pagellm runs a model on one device; tensor parallelism "
                "is not implemented yet (use tensor_parallel_size=1)")
        known = set(_pagellm.engine_arg_names())
        for name in engine_args:
            if name not in known:
                raise TypeError(f"LLM() got an unexpected keyword argument '{name}' (engine keywords: {', '.join(sorted(known))})")
        args = [(name, value) for name, value in engine_args.items() if value is not None]
        self._engine = _pagellm.Engine.load(os.fspath(model), revision or "", args)
        self._request_counter = itertools.count()
        native_tokenizer = self._engine.tokenizer()
        self._tokenizer = Tokenizer(native_tokenizer, self._engine) if native_tokenizer is not None else None

    # --- vLLM's API ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        use_tqdm: bool = True,  # accepted for vLLM scripts; pagellm shows no progress bar
    ) -> list[RequestOutput]:
        """Completes every prompt (a str, {"prompt": str} or {"prompt_token_ids": [...]}, or a list of
        them) in one batch; returns one RequestOutput per prompt, in order. Ctrl-C aborts the batch."""
        prompt_list = _as_list(prompts, (str, dict))
        return self._run(self._submit([self._prompt(p, i) for i, p in enumerate(prompt_list)], sampling_params))

    def chat(
        self,
        messages: Union[list[dict[str, Any]], list[list[dict[str, Any]]]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        use_tqdm: bool = True,
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        add_generation_prompt: bool = True,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> list[RequestOutput]:
        """Answers one conversation (a list of {"role", "content"} messages) or a list of them. The prompt
        is the model's chat template rendered exactly as ``pagellm serve``'s /v1/chat/completions does."""
        return self._run(self._submit(self._chat_prompts(messages, chat_template_kwargs, add_generation_prompt, tools),
                                      sampling_params))

    def generate_stream(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
    ) -> Iterator[RequestOutput]:
        """pagellm extension: yields a RequestOutput as soon as any completion has new tokens, holding
        only the new text, token ids and logprobs (their concatenation is what generate() returns).
        The last one of a prompt has finished=True. Leaving the loop early (break, an exception,
        Ctrl-C) aborts the requests still running."""
        prompt_list = _as_list(prompts, (str, dict))
        return self._stream(self._submit([self._prompt(p, i) for i, p in enumerate(prompt_list)], sampling_params))

    def chat_stream(
        self,
        messages: Union[list[dict[str, Any]], list[list[dict[str, Any]]]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        add_generation_prompt: bool = True,
        tools: Optional[list[dict[str, Any]]] = None,
    ) -> Iterator[RequestOutput]:
        """pagellm extension: chat() streamed as generate_stream() streams."""
        return self._stream(self._submit(self._chat_prompts(messages, chat_template_kwargs, add_generation_prompt, tools),
                                         sampling_params))

    def get_tokenizer(self) -> Optional[Tokenizer]:
        """The model's tokenizer, or None when its folder has no tokenizer.json."""
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """vLLM's defaults with the model's generation_config.json (temperature, top_p, top_k, min_p,
        repetition_penalty, max_new_tokens) on top, as generate() uses when given no params."""
        return SamplingParams(**self._engine.generation_defaults())

    # --- internals ----------------------------------------------------------------------------

    def _prompt(self, prompt: PromptType, index: int) -> _Prompt:
        if isinstance(prompt, str):
            return _Prompt(prompt, self._encode(prompt, index))
        if isinstance(prompt, dict):
            if "prompt_token_ids" in prompt:
                ids = prompt["prompt_token_ids"]
                if not isinstance(ids, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise ValueError(f"prompt {index}: 'prompt_token_ids' must be a list of token ids")
                return _Prompt(prompt.get("prompt"), list(ids))
            if isinstance(prompt.get("prompt"), str):
                return _Prompt(prompt["prompt"], self._encode(prompt["prompt"], index))
            raise ValueError(f"prompt {index}: a dict prompt needs 'prompt' (str) or 'prompt_token_ids' (list of ints)")
        raise TypeError(f"prompt {index} must be a str or a dict with 'prompt' or 'prompt_token_ids', "
                        f"got {type(prompt).__name__}")

    def _encode(self, text: str, index: int) -> list[int]:
        if self._tokenizer is None:
            raise ValueError(f"prompt {index}: this model has no tokenizer.json; give {{'prompt_token_ids': [...]}}")
        return self._tokenizer.encode(text, add_special_tokens=True)

    def _chat_prompts(self, messages, chat_template_kwargs, add_generation_prompt, tools) -> list[_Prompt]:
        # One conversation is a list of message dicts; a batch is a list of such lists.
        single = isinstance(messages, (list, tuple)) and (not messages or isinstance(messages[0], dict))
        conversations = [messages] if single else list(messages)
        prompts = []
        for conversation in conversations:
            text, ids = render_chat(self._engine, conversation, add_generation_prompt, chat_template_kwargs, tools)
            prompts.append(_Prompt(text, ids))
        return prompts

    def _submit(self, prompts: list[_Prompt], sampling_params) -> _Submission:
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"{len(params)} sampling params for {len(prompts)} prompts: give one, or one per prompt")
            for p in params:
                if not isinstance(p, SamplingParams):
                    raise TypeError(f"sampling_params must be SamplingParams, got {type(p).__name__}")
        return _Submission(self, prompts, params)

    def _run(self, submission: _Submission) -> list[RequestOutput]:
        batch = submission.batch
        if batch is None:
            return []
        try:
            while not batch.wait(_POLL_MS):
                pass
        finally:
            # Ctrl-C (KeyboardInterrupt) or any other exception: nothing stays queued.
            batch.abort_unfinished(_ABORT_WAIT_S)
        results = batch.results()
        completions: list[list[CompletionOutput]] = [[] for _ in submission.prompts]
        prompt_logprobs: list[Optional[PromptLogprobs]] = [None] * len(submission.prompts)
        for result, where in zip(results, submission.choices):
            _raise_if_failed(result.error)
            params = submission.params[where.prompt]
            logprobs = self._sample_logprobs(result.logprobs, result.token_ids) if params.logprobs is not None else None
            completions[where.prompt].append(CompletionOutput(
                index=where.choice, text=result.text, token_ids=list(result.token_ids),
                cumulative_logprob=_cumulative(result.logprobs) if logprobs is not None else None, logprobs=logprobs,
                finish_reason=result.finish_reason, stop_reason=self._stop_reason(result, params)))
            if params.prompt_logprobs is not None and where.choice == 0:
                prompt_logprobs[where.prompt] = self._prompt_logprobs(result.prompt_logprobs)
        return [
            RequestOutput(request_id=submission.request_ids[i], prompt=prompt.text, prompt_token_ids=prompt.token_ids,
                          prompt_logprobs=prompt_logprobs[i], outputs=completions[i], finished=True,
                          num_cached_tokens=_first_choice(results, submission.choices, i).num_cached_tokens)
            for i, prompt in enumerate(submission.prompts)
        ]

    def _stream(self, submission: _Submission) -> Iterator[RequestOutput]:
        batch = submission.batch
        if batch is None:
            return
        unfinished = [p.n for p in submission.params]  # completions still running, per prompt
        cumulative = [0.0] * len(submission.choices)
        try:
            while not batch.finished:
                for index, delta in batch.poll(_POLL_MS):
                    _raise_if_failed(delta.error)
                    where = submission.choices[index]
                    params = submission.params[where.prompt]
                    logprobs = None
                    if params.logprobs is not None:
                        logprobs = self._sample_logprobs(delta.logprobs, delta.token_ids)
                        cumulative[index] += _cumulative(delta.logprobs)
                    if delta.finish_reason is not None:
                        unfinished[where.prompt] -= 1
                    prompt = submission.prompts[where.prompt]
                    yield RequestOutput(
                        request_id=submission.request_ids[where.prompt], prompt=prompt.text,
                        prompt_token_ids=prompt.token_ids,
                        prompt_logprobs=self._prompt_logprobs(delta.prompt_logprobs) if delta.prompt_logprobs else None,
                        outputs=[CompletionOutput(
                            index=where.choice, text=delta.text, token_ids=list(delta.token_ids),
                            cumulative_logprob=cumulative[index] if logprobs is not None else None, logprobs=logprobs,
                            finish_reason=delta.finish_reason,
                            stop_reason=self._stop_reason(delta, params) if delta.finish_reason else None)],
                        finished=unfinished[where.prompt] == 0, num_cached_tokens=delta.num_cached_tokens)
        finally:
            batch.abort_unfinished(_ABORT_WAIT_S)

    def _stop_reason(self, result, params: SamplingParams) -> Union[int, str, None]:
        """vLLM's stop_reason: the stop string or stop token id that ended the completion; None for EOS or length."""
        if result.finish_reason != "stop":
            return None
        if result.stop_string_index >= 0:
            return params.stop[result.stop_string_index]
        if result.token_ids:
            last = result.token_ids[-1]
            is_eos = last in self._engine.eos_token_ids and not params.ignore_eos
            if not is_eos and last in params.stop_token_ids:
                return last
        return None

    def _decoded(self, token_id: int) -> Optional[str]:
        return self._tokenizer.decode([token_id]) if self._tokenizer is not None else None

    def _sample_logprobs(self, steps, token_ids) -> SampleLogprobs:
        out: SampleLogprobs = []
        for step, token in zip(steps, token_ids):
            ranks = {alt.token_id: rank for rank, alt in enumerate(step.top, 1)}
            entry = {token: Logprob(step.sampled_logprob, ranks.get(token), self._decoded(token))}
            for rank, alt in enumerate(step.top, 1):
                entry.setdefault(alt.token_id, Logprob(alt.logprob, rank, self._decoded(alt.token_id)))
            out.append(entry)
        return out

    def _prompt_logprobs(self, positions) -> PromptLogprobs:
        out: PromptLogprobs = [None]  # the first prompt token has nothing before it
        for position in positions:
            entry = {position.token_id: Logprob(position.logprob, position.rank, self._decoded(position.token_id))}
            for rank, alt in enumerate(position.top, 1):
                entry.setdefault(alt.token_id, Logprob(alt.logprob, rank, self._decoded(alt.token_id)))
            out.append(entry)
        return out


def _as_list(items, single_types: tuple) -> list:
    return [items] if isinstance(items, single_types) else list(items)


def _cumulative(steps) -> float:
    return float(sum(step.sampled_logprob for step in steps))


def _first_choice(results, choices: list[_Choice], prompt: int):
    return next(r for r, where in zip(results, choices) if where.prompt == prompt)


def _raise_if_failed(error: str) -> None:
    if error:
        raise RuntimeError(error)
