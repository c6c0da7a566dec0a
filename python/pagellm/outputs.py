"""vLLM's output shapes: RequestOutput holds one prompt's CompletionOutputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union


@dataclass
class Logprob:
    """One token's log-probability; rank 1 is the most likely token (None where not known)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# Per generated token: {token id: Logprob} with the sampled token and the top alternatives.
SampleLogprobs = list[dict[int, Logprob]]
# Per prompt token: None for the first, then {token id: Logprob} as above.
PromptLogprobs = list[Optional[dict[int, Logprob]]]


@dataclass
class CompletionOutput:
    """One completion: ``finish_reason`` is "stop", "length" or "abort" (None while it runs);
    ``stop_reason`` the stop string or stop token id that ended it (None for EOS or length)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """One prompt's completions. In ``LLM.generate_stream`` each one holds only what is new."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    metrics: Optional[dict] = field(default=None, repr=False)
