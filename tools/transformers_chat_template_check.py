#!/usr/bin/env python3
"""Checks tools/render_chat_template.py (the jinja2 oracle the C++ tests run) against transformers
itself, on every case of tests/golden/chat_template/conversations.json: the same text, or both fail.

Run where transformers is installed (the GPU machine), from the repository root, with the
tokenizer_config.json files the tests use (assets/tokenizers/*, fetched by scripts/setup.sh, and
tests/golden/chat_template/templates/*):

    python3 tools/transformers_chat_template_check.py [--out report.json]
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import render_chat_template as oracle  # noqa: E402


def config_path(family):
    kept = os.path.join(ROOT, "tests", "golden", "chat_template", "templates", family, "tokenizer_config.json")
    return kept if os.path.exists(kept) else os.path.join(ROOT, "assets", "tokenizers", family, "tokenizer_config.json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    args = parser.parse_args()
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    with open(os.path.join(ROOT, "tests", "golden", "chat_template", "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    counts, mismatches = {}, []
    for case in cases:
        request = dict(case, tokenizer_config=config_path(case["family"]))
        source, tokens = oracle.load_template(request)
        try:
            want = ("ok", oracle.render(request))
        except Exception as e:  # noqa: BLE001
            want = ("error", f"{type(e).__name__}: {e}")
        kwargs = dict(tokens)
        kwargs.update(case.get("kwargs") or {})
        try:
            rendered, _ = render_jinja_template(
                conversations=[case["messages"]], tools=case.get("tools"), documents=None, chat_template=source,
                add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)
            got = ("ok", rendered[0])
        except Exception as e:  # noqa: BLE001
            got = ("error", f"{type(e).__name__}: {e}")
        same = want[0] == got[0] and (want[0] == "error" or want[1] == got[1])
        passed, total = counts.get(case["family"], (0, 0))
        counts[case["family"]] = (passed + same, total + 1)
        if not same:
            mismatches.append({"family": case["family"], "name": case["name"], "jinja2": want, "transformers": got})
    report = {"transformers": transformers.__version__, "counts": counts, "mismatches": mismatches}
    text = json.dumps(report, ensure_ascii=False, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    print(json.dumps({"transformers": transformers.__version__, "counts": counts,
                      "mismatches": [(m["family"], m["name"]) for m in mismatches]}, ensure_ascii=False))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
