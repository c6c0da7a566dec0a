"""Shared fixtures of the Python package's tests (run by CTest: python -m pytest tests/python with
PYTHONPATH=build/python, PAGELLM_CLI=the built pagellm binary)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE_ROOT = Path(os.environ.get("PAGELLM_SOURCE_DIR", Path(__file__).resolve().parents[2]))
GOLDEN_ROOT = SOURCE_ROOT / "tests" / "golden"


def missing(reason: str):
    """A missing asset fails under CI (CI=true) and skips elsewhere."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cli() -> str:
    path = os.environ.get("PAGELLM_CLI") or str(SOURCE_ROOT / "build" / "src" / "pagellm")
    if not os.access(path, os.X_OK):
        missing(f"no pagellm binary at {path} (set PAGELLM_CLI)")
    return path


def run_cli(cli: str, *args: str) -> str:
    done = subprocess.run([cli, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"pagellm {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def chat_model_dir(cli, tmp_path_factory) -> str:
    """qwen3-tiny (random weights, f32) with the real Qwen3 tokenizer and chat template."""
    tokenizer = SOURCE_ROOT / "assets" / "tokenizers" / "qwen3"
    if not (tokenizer / "tokenizer.json").exists():
        missing(f"no Qwen3 tokenizer in {tokenizer} (scripts/setup.sh fetches it)")
    out = tmp_path_factory.mktemp("models") / "qwen3-tiny"
    run_cli(cli, "make-model", "--preset", "qwen3-tiny", "--dtype", "f32", "--tokenizer", str(tokenizer), "--out", str(out))
    return str(out)


@pytest.fixture(scope="session")
def chat_llm(chat_model_dir):
    from pagellm import LLM

    return LLM(model=chat_model_dir, device="cpu", max_model_len=4096, kv_cache_memory_bytes=64 << 20)


def golden_fixture(name: str) -> Path:
    path = GOLDEN_ROOT / name
    if not (path / "expected.json").exists():
        missing(f"no golden fixture {path}")
    return path


def which(program: str) -> str:
    return shutil.which(program) or ""
