"""PEP 517 build backend of the pagellm Python package, with no dependency outside the standard
library: CMake builds the extension module (target pagellm_python) and this file packs
build/.../python/pagellm/ into a wheel.

The CMake build folder: $PAGELLM_BUILD_DIR when set; else build/ when it was configured for this
same interpreter (then only the module is rebuilt); else build-python-<tag>/. $PAGELLM_CMAKE_ARGS
adds configure arguments (e.g. "-DPAGELLM_CUDA=OFF")."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

NAME = "pagellm"
SOURCE_ROOT = Path(__file__).resolve().parents[2]


def _version() -> str:
    text = (SOURCE_ROOT / "pyproject.toml").read_text()
    return re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)


def _tag() -> str:
    interpreter = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{interpreter}-{interpreter}-{platform}"


def _cached_python(build_dir: Path) -> str:
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return ""
    match = re.search(r"^_?Python_EXECUTABLE:\w+=(.*)$", cache.read_text(), re.M)
    return match.group(1).strip() if match else ""


def _same_python(executable: str) -> bool:
    return bool(executable) and os.path.realpath(executable) == os.path.realpath(sys.executable)


def _build_dir() -> Path:
    if os.environ.get("PAGELLM_BUILD_DIR"):
        return Path(os.environ["PAGELLM_BUILD_DIR"]).resolve()
    default = SOURCE_ROOT / "build"
    if _same_python(_cached_python(default)):
        return default
    return SOURCE_ROOT / f"build-python-{_tag()}"


def _run(args: list[str]) -> None:
    print("pagellm_build:", " ".join(shlex.quote(a) for a in args), file=sys.stderr, flush=True)
    subprocess.run(args, check=True, cwd=SOURCE_ROOT)


def _build_module() -> Path:
    build_dir = _build_dir()
    if not _same_python(_cached_python(build_dir)):
        configure = ["cmake", "-S", str(SOURCE_ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     "-DPAGELLM_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        if not (build_dir / "CMakeCache.txt").exists():
            configure += ["-DPAGELLM_BUILD_TESTS=OFF"] + (["-G", "Ninja"] if shutil.which("ninja") else [])
        _run(configure + shlex.split(os.environ.get("PAGELLM_CMAKE_ARGS", "")))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run(["cmake", "--build", str(build_dir), "--target", "pagellm_python", "-j", jobs])
    return build_dir / "python" / NAME


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _write_wheel(wheel_directory: str, package_dir: Path) -> str:
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-{_tag()}.whl"
    metadata = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nRequires-Python: >=3.8\n" \
               "Summary: pagellm's engine with vLLM's offline Python API (LLM, SamplingParams)\n"
    wheel = f"Wheel-Version: 1.0\nGenerator: pagellm_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"
    files = {f"{NAME}/{p.name}": p.read_bytes() for p in sorted(package_dir.iterdir())
             if p.suffix == ".py" or (p.name.startswith("_pagellm.") and p.suffix == ".so")}
    if not any(name.endswith(".so") for name in files):
        raise RuntimeError(f"no extension module in {package_dir}")
    files[f"{dist_info}/METADATA"] = metadata.encode()
    files[f"{dist_info}/WHEEL"] = wheel.encode()
    files[f"{dist_info}/top_level.txt"] = f"{NAME}\n".encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            archive.writestr(info, data, zipfile.ZIP_DEFLATED)
    return wheel_name


# --- PEP 517 hooks ---

def get_requires_for_build_wheel(config_settings=None) -> list[str]:
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    return _write_wheel(wheel_directory, _build_module())
