#!/usr/bin/env bash
# Configures and builds pagellm into build/ (Release, Ninja, ccache when present).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${PAGELLM_BUILD_DIR:-build}
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$build_dir" -j"$(nproc)"
