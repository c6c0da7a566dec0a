"""Ctrl-C during generate or a stream aborts the engine requests: KeyboardInterrupt reaches the
caller, no request or KV block stays behind, and the LLM keeps working."""

import _thread
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pagellm import SamplingParams

# Long enough that an interrupt after a fraction of a second lands mid-generation.
LONG = SamplingParams(temperature=0, max_tokens=3000, ignore_eos=True)


def wait_leak_free(llm, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while not llm._engine.is_idle_and_leak_free():
        assert time.monotonic() < deadline, "requests or KV blocks left behind"
        time.sleep(0.01)


def test_ctrl_c_during_generate_aborts_cleanly(chat_llm):
    timer = threading.Timer(0.3, _thread.interrupt_main)  # what Ctrl-C does: SIGINT's handler in the main thread
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        chat_llm.generate(["one", "two", "three"], LONG)
    assert time.monotonic() - started < 5.0, "the interrupt was not seen while the engine ran"
    timer.join()
    wait_leak_free(chat_llm)
    out = chat_llm.generate("again", SamplingParams(temperature=0, max_tokens=4))[0]
    assert len(out.outputs[0].token_ids) == 4


def test_leaving_a_stream_early_aborts(chat_llm):
    stream = chat_llm.generate_stream(["a", "b"], LONG)
    got = 0
    for out in stream:
        got += len(out.outputs[0].token_ids)
        if got >= 5:
            break
    stream.close()
    wait_leak_free(chat_llm)
    with pytest.raises(KeyboardInterrupt):
        for out in chat_llm.generate_stream("c", LONG):
            raise KeyboardInterrupt  # Ctrl-C while the caller handles an output
    wait_leak_free(chat_llm)


CHILD = textwrap.dedent("""
    import sys, time
    from pagellm import LLM, SamplingParams
    llm = LLM(model=sys.argv[1], device="cpu", max_model_len=4096, kv_cache_memory_bytes=64 << 20)
    print("ready", flush=True)
    try:
        llm.generate(["x", "y"], SamplingParams(temperature=0, max_tokens=4000, ignore_eos=True))
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        deadline = time.monotonic() + 10
        while not llm._engine.is_idle_and_leak_free() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("interrupted leak_free=%s" % llm._engine.is_idle_and_leak_free(), flush=True)
        out = llm.generate("z", SamplingParams(temperature=0, max_tokens=3))[0]
        print("after %d" % len(out.outputs[0].token_ids), flush=True)
""")


def test_sigint_in_a_real_process(chat_model_dir):
    child = subprocess.Popen([sys.executable, "-c", CHILD, chat_model_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    assert child.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # into the generation
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.split("\n")[:2] == ["interrupted leak_free=True", "after 3"], out + err


def test_other_threads_run_while_the_engine_works(chat_llm):
    """The GIL is released while the engine runs: a Python thread keeps ticking during generate."""
    ticks = 0
    done = threading.Event()

    def tick():
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    thread = threading.Thread(target=tick)
    thread.start()
    started = time.monotonic()
    chat_llm.generate(["a", "b"], SamplingParams(temperature=0, max_tokens=150, ignore_eos=True))
    elapsed = time.monotonic() - started
    done.set()
    thread.join()
    # Held through each 50 ms wait, the GIL would allow about one tick per wait; released, hundreds.
    assert ticks > elapsed / 0.02, f"{ticks} ticks in {elapsed:.2f} s"
