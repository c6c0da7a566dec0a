#!/usr/bin/env python3
"""Oracle for pagellm's chat templates: renders a chat template the way Hugging Face
transformers' apply_chat_template does, using plain jinja2 (no transformers needed).

transformers compiles the template with
    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
a tojson filter that is json.dumps(ensure_ascii=False, ...), and globals raise_exception and
strftime_now, then calls
    template.render(messages=..., tools=..., documents=..., add_generation_prompt=...,
                    **tokenizer.special_tokens_map, **kwargs)
This script does the same.

A request is a JSON object:
    {"template": "..."} or {"tokenizer_config": "path/to/tokenizer_config.json"},
    "messages": [...], "tools": [...] | null, "add_generation_prompt": bool,
    "kwargs": {...}, "special_tokens": {...} (used with "template")
Usage:
    render_chat_template.py < request.json          prints the rendered prompt
    render_chat_template.py request.json            same, from a file
    render_chat_template.py --batch requests.json   a JSON list in, a JSON list out:
                                                    [{"ok": true, "text": ...} | {"ok": false, "error": ...}]
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_NAMES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class GenerationTracker(jinja2.ext.Extension):
    """transformers' AssistantTracker: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def token_content(token):
    if isinstance(token, dict):
        return token.get("content")
    return token


def special_tokens_map(config):
    """transformers' tokenizer.special_tokens_map: set, non-empty special tokens as strings."""
    out = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = token_content(config.get(name))
        if value:
            out[name] = value
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for name, token in extra.items():
            value = token_content(token)
            if value:
                out[name] = value
    additional = config.get("additional_special_tokens")
    if isinstance(additional, list) and additional:
        out["additional_special_tokens"] = [token_content(t) for t in additional]
    return out


def load_template(request):
    if "tokenizer_config" in request:
        with open(request["tokenizer_config"], encoding="utf-8") as f:
            config = json.load(f)
        source = config["chat_template"]
        if isinstance(source, list):
            source = {t["name"]: t["template"] for t in source}["default"]
        return source, special_tokens_map(config)
    return request["template"], special_tokens_map(request.get("special_tokens", {}))


def render(request):
    source, tokens = load_template(request)
    kwargs = dict(tokens)
    kwargs.update(request.get("kwargs") or {})
    return compile_template(source).render(
        messages=request.get("messages", []),
        tools=request.get("tools"),
        documents=None,
        add_generation_prompt=request.get("add_generation_prompt", False),
        **kwargs,
    )


def main():
    args = sys.argv[1:]
    if args and args[0] == "--batch":
        with open(args[1], encoding="utf-8") as f:
            requests = json.load(f)
        results = []
        for request in requests:
            try:
                results.append({"ok": True, "text": render(request)})
            except Exception as e:  # the test compares error-or-not, and the message of raise_exception
                results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
        sys.stdout.write(json.dumps(results, ensure_ascii=False))
        return 0
    stream = open(args[0], encoding="utf-8") if args else sys.stdin
    request = json.load(stream)
    try:
        text = render(request)
    except Exception as e:
        sys.stderr.write(f"{type(e).__name__}: {e}\n")
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
