"""SamplingParams with vLLM's fields, defaults and meaning; the engine checks the numbers."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Union

from pagellm import _pagellm


@dataclass
class SamplingParams:
    """How to sample one prompt's completions (vLLM's ``SamplingParams``).

    ``n`` completions per prompt; ``temperature`` 0 is greedy; ``top_k`` 0 or -1 is off; ``max_tokens``
    None means up to the model's max_model_len; ``stop`` strings end a completion (left out of its
    text unless ``include_stop_str_in_output``); ``stop_token_ids`` end it after that token;
    ``logprobs`` asks for that many alternatives per token (0: the sampled token's only);
    ``seed`` makes a request reproducible, alone or batched. Bad values raise ValueError.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None  # kept as a list
    stop_token_ids: Optional[list[int]] = None    # kept as a list
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: Optional[dict[int, float]] = None  # kept as a dict

    def __post_init__(self) -> None:
        if not isinstance(self.stop, (str, list, tuple, type(None))):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        if not isinstance(self.stop_token_ids, (list, tuple, type(None))):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        if not isinstance(self.logit_bias, (dict, type(None))):
            raise ValueError(f"logit_bias must map token ids to numbers, got {self.logit_bias!r}")
        self.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.logit_bias = dict(self.logit_bias or {})
        self._check_shapes()
        self.to_engine(max_tokens=self.max_tokens if self.max_tokens is not None else max(1, self.min_tokens)).validate()

    def _check_shapes(self) -> None:
        """What the engine's own check cannot see: Python types and the fields it has no notion of."""
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not all(isinstance(s, str) for s in self.stop):
            raise ValueError(f"stop must be a string or a list of strings, got {self.stop!r}")
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids must be a list of token ids, got {self.stop_token_ids!r}")
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)):
            raise ValueError(f"max_tokens must be an integer or None, got {self.max_tokens!r}")
        for name in ("logprobs", "prompt_logprobs", "seed"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"{name} must be an integer or None, got {value!r}")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {self.seed}")

    def to_engine(self, max_tokens: int, seed_offset: int = 0) -> "_pagellm.SamplingParams":
        """The engine's struct for one completion (its seed moved by seed_offset, as the server does for n > 1)."""
        native = _pagellm.SamplingParams()
        native.temperature = _number("temperature", self.temperature, float)
        native.top_p = _number("top_p", self.top_p, float)
        native.top_k = _number("top_k", self.top_k, int)
        native.min_p = _number("min_p", self.min_p, float)
        native.seed = None if self.seed is None else (self.seed + seed_offset) % 2**64
        native.max_tokens = max_tokens
        native.min_tokens = _number("min_tokens", self.min_tokens, int)
        native.stop_token_ids = self.stop_token_ids
        native.ignore_eos = bool(self.ignore_eos)
        native.presence_penalty = _number("presence_penalty", self.presence_penalty, float)
        native.frequency_penalty = _number("frequency_penalty", self.frequency_penalty, float)
        native.repetition_penalty = _number("repetition_penalty", self.repetition_penalty, float)
        native.num_logprobs = self.logprobs
        native.num_prompt_logprobs = self.prompt_logprobs
        try:
            native.logit_bias = [(int(token), float(bias)) for token, bias in self.logit_bias.items()]
        except (TypeError, ValueError):
            raise ValueError(f"logit_bias must map token ids to numbers, got {self.logit_bias!r}") from None
        return native

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)


def _number(name: str, value, kind: type):
    """value as the engine's int or float; a bool, a string or a fraction for an int is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ValueError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)
