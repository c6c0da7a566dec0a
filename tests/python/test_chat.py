"""llm.chat renders the prompt exactly as `pagellm serve` does for /v1/chat/completions (the same
request parsing, template and tokenization), and as `pagellm chat-template` prints it."""

import json
import re
import subprocess
import urllib.request

import pytest

from conftest import run_cli
from pagellm import SamplingParams

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a prime number."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "And one more, with ünïcode ✓?"},
]


def chat_template_cli(cli, model_dir, tmp_path, messages, kwargs=None):
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(messages))
    args = ["chat-template", "--tokenizer", model_dir, "--messages", str(path), "--add-generation-prompt"]
    if kwargs:
        args += ["--kwargs", json.dumps(kwargs)]
    return run_cli(cli, *args)


@pytest.mark.parametrize("kwargs", [None, {"enable_thinking": False}])
def test_chat_prompt_is_the_chat_template_cli_rendering(cli, chat_model_dir, chat_llm, tmp_path, kwargs):
    out = chat_llm.chat(CONVERSATION, SamplingParams(temperature=0, max_tokens=3), chat_template_kwargs=kwargs)[0]
    want = chat_template_cli(cli, chat_model_dir, tmp_path, CONVERSATION, kwargs)
    assert out.prompt == want
    assert out.prompt_token_ids == chat_llm.get_tokenizer().encode(want, add_special_tokens=False)
    assert len(out.outputs[0].token_ids) == 3


def test_tokenizer_apply_chat_template_is_the_same_rendering(chat_llm):
    tokenizer = chat_llm.get_tokenizer()
    text = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True)
    out = chat_llm.chat(CONVERSATION, SamplingParams(max_tokens=1))[0]
    assert (text, ids) == (out.prompt, out.prompt_token_ids)
    assert text.endswith("<|im_start|>assistant\n")
    assert not tokenizer.apply_chat_template(CONVERSATION, tokenize=False).endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(ids) == text


@pytest.fixture(scope="module")
def server(cli, chat_model_dir):
    proc = subprocess.Popen([cli, "serve", "--model", chat_model_dir, "--host", "127.0.0.1", "--port", "0", "--device", "cpu",
                             "--max-model-len", "4096", "--kv-cache-memory", str(64 << 20)],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        match = re.search(r"listening on (http://[0-9.]+:\d+)", line)
        if match:
            url = match.group(1)
            break
    assert url, "pagellm serve did not start:\n" + "".join(seen)
    yield url
    proc.terminate()
    proc.wait(timeout=30)
    proc.stderr.close()


def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.mark.parametrize("messages", [
    CONVERSATION,
    # content parts, which the server joins into text before the template sees them
    [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": " there"}]}],
])
def test_chat_prompt_tokens_are_the_servers(server, chat_llm, messages):
    served = post(server + "/tokenize", {"messages": messages, "chat_template_kwargs": {"enable_thinking": False}})
    out = chat_llm.chat(messages, SamplingParams(max_tokens=1), chat_template_kwargs={"enable_thinking": False})[0]
    assert out.prompt_token_ids == served["tokens"]


def test_chat_greedy_answer_is_the_servers(server, chat_llm):
    """The whole path, not only the prompt: the same greedy answer as /v1/chat/completions."""
    messages = [{"role": "user", "content": "Count to three."}]
    served = post(server + "/v1/chat/completions", {"model": served_name(server), "messages": messages,
                                                    "max_tokens": 8, "temperature": 0})
    out = chat_llm.chat(messages, SamplingParams(temperature=0, max_tokens=8))[0]
    assert out.outputs[0].text == served["choices"][0]["message"]["content"]
    assert len(out.prompt_token_ids) == served["usage"]["prompt_tokens"]


def served_name(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return json.loads(response.read())["data"][0]["id"]


def test_chat_batch_of_conversations(chat_llm):
    conversations = [[{"role": "user", "content": "Hi"}], [{"role": "user", "content": "Bye"}]]
    params = SamplingParams(temperature=0, max_tokens=4)
    together = chat_llm.chat(conversations, params)
    assert [o.outputs[0].token_ids for o in together] == [chat_llm.chat(c, params)[0].outputs[0].token_ids for c in conversations]


def test_chat_bad_messages_are_value_errors(chat_llm):
    with pytest.raises(ValueError, match="messages"):
        chat_llm.chat([], SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="role"):
        chat_llm.chat([{"content": "no role"}], SamplingParams(max_tokens=1))
