#!/usr/bin/env python3
"""Random differential check of pagellm's chat templates against jinja2: random conversations
(roles including tool/ipython/tool_results, content as text, None, parts, mappings; assistant
tool_calls with good and bad ids, dict and string arguments; tools, builtin_tools and
tools_in_user_message kwargs) rendered by tools/render_chat_template.py and by
`pagellm chat-template` for Llama 3.1, Mistral and Gemma 3. Both must give the same text, or both
fail. Run from the repository root after building pagellm:

    python3 tools/chat_template_random_diff.py SEED COUNT [PAGELLM_BINARY]
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import render_chat_template as oracle  # noqa: E402

rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
PAGELLM = sys.argv[3] if len(sys.argv) > 3 else "build/src/pagellm"
TMP = tempfile.mkdtemp(prefix="pagellm_ct_diff_")
M_PATH, T_PATH = os.path.join(TMP, "messages.json"), os.path.join(TMP, "tools.json")
FAM = {"llama3_1": "tests/golden/chat_template/templates/llama3_1", "mistral": "tests/golden/chat_template/templates/mistral",
       "gemma3": "assets/tokenizers/gemma3"}
TEXTS = ["hi", " padded ", "", "\n", "é 東京 👩‍👩‍👧", "{{ x }}", "a\tb\r\nc", "it's \"q\" \\", "None", "0"]
def rtext(): return rng.choice(TEXTS) * rng.randint(1, 2)
def rval(d=0):
    k = rng.random()
    if k < 0.4 or d > 2: return rtext()
    if k < 0.5: return rng.choice([None, True, False, 0, 1.5, -0.0, 1e20, 7])
    if k < 0.75: return [rval(d+1) for _ in range(rng.randint(0, 3))]
    return {rtext() or "k": rval(d+1) for _ in range(rng.randint(0, 3))}
def rcall():
    args = rng.choice([{"city": rtext()}, json.dumps({"q": rtext()}), rval(), {}])
    c = {"type": "function", "function": {"name": rng.choice(["get_weather", "brave_search", "f"]), "arguments": args}}
    if rng.random() < 0.8: c["id"] = rng.choice(["abcDEF123", "call_1", "123456789", ""])
    return c
def rmsg(i):
    role = rng.choice(["user", "assistant", "user", "assistant", "system", "tool", "ipython", "tool_results"])
    m = {"role": role}
    k = rng.random()
    m["content"] = rtext() if k < 0.6 else (None if k < 0.7 else ([{"type": "text", "text": rtext()}] if k < 0.85 else rval()))
    if role == "assistant" and rng.random() < 0.4:
        m["tool_calls"] = [rcall() for _ in range(rng.choice([1, 1, 2, 0]))]
    if role in ("tool", "tool_results") and rng.random() < 0.8:
        m["tool_call_id"] = rng.choice(["abcDEF123", "x", "123456789"])
    return m
def conv():
    n = rng.randint(0, 6)
    msgs = []
    for i in range(n):
        if rng.random() < 0.6:
            msgs.append({"role": ["user", "assistant"][i % 2], "content": rtext()})
        else:
            msgs.append(rmsg(i))
    return msgs
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
bad = 0; total = 0; oks = 0
for it in range(int(sys.argv[2]) if len(sys.argv) > 2 else 100):
    fam = rng.choice(list(FAM))
    req = {"tokenizer_config": FAM[fam] + "/tokenizer_config.json", "messages": conv(),
           "tools": rng.choice([None, [TOOL], []]), "add_generation_prompt": rng.random() < 0.5, "kwargs": {}}
    if rng.random() < 0.3: req["kwargs"]["builtin_tools"] = ["brave_search"]
    if rng.random() < 0.3: req["kwargs"]["tools_in_user_message"] = rng.random() < 0.5
    try: want = ("ok", oracle.render(req))
    except Exception as e: want = ("err", f"{type(e).__name__}: {e}")
    open(M_PATH, "w").write(json.dumps(req["messages"]))
    cmd = [PAGELLM, "chat-template", "--tokenizer", FAM[fam], "--messages", M_PATH, "--kwargs", json.dumps(req["kwargs"])]
    if req["tools"] is not None:
        open(T_PATH, "w").write(json.dumps(req["tools"])); cmd += ["--tools", T_PATH]
    if req["add_generation_prompt"]: cmd.append("--add-generation-prompt")
    p = subprocess.run(cmd, capture_output=True)
    got = ("ok", p.stdout.decode()) if p.returncode == 0 else ("err", p.stderr.decode())
    total += 1; oks += want[0] == "ok" and got[0] == "ok"
    if want[0] != got[0] or (want[0] == "ok" and want[1] != got[1]):
        bad += 1
        if bad <= 6:
            print("MISMATCH", fam, json.dumps(req, ensure_ascii=False)[:600]); print("  want", repr(want)[:400]); print("  got ", repr(got)[:400])
print(total, "cases,", bad, "mismatches,", oks, "rendered by both")
shutil.rmtree(TMP, ignore_errors=True)
sys.exit(1 if bad else 0)
