"""The model's tokenizer (tokenizer.json), as ``LLM.get_tokenizer()`` returns it."""

from __future__ import annotations

import json
from typing import Any, Optional

from pagellm import _pagellm


class Tokenizer:
    """encode / decode as Hugging Face tokenizers do for the same tokenizer.json; apply_chat_template
    renders as ``LLM.chat`` and the server's /v1/chat/completions do."""

    def __init__(self, native: "_pagellm.Tokenizer", engine: "_pagellm.Engine") -> None:
        self._native = native
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._native.encode(text, add_special_tokens)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._native.decode(list(token_ids), skip_special_tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._native.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[Optional[int]]:
        return [self._native.token_to_id(t) for t in tokens]

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        tools: Optional[list[dict[str, Any]]] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **template_kwargs: Any,
    ):
        """The prompt text (tokenize=False) or its token ids; extra keywords are template variables."""
        text, token_ids = render_chat(self._engine, conversation, add_generation_prompt, template_kwargs, tools)
        return token_ids if tokenize else text

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._native.eos_token_id

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._native.bos_token_id

    @property
    def eos_token(self) -> str:
        return self._native.eos_token

    @property
    def bos_token(self) -> str:
        return self._native.bos_token

    def __len__(self) -> int:
        return self._native.vocab_size


def render_chat(engine: "_pagellm.Engine", messages, add_generation_prompt: bool, template_kwargs, tools) -> tuple[str, list[int]]:
    """One conversation through the server's chat path: the same request parsing, template and tokens."""
    body: dict[str, Any] = {"messages": messages, "add_generation_prompt": add_generation_prompt}
    if template_kwargs:
        body["chat_template_kwargs"] = template_kwargs
    if tools is not None:
        body["tools"] = tools
    try:
        body_json = json.dumps(body, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"[chat] the messages are not JSON data: {e}") from None
    return engine.render_chat(body_json)
