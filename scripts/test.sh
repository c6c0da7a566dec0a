#!/usr/bin/env bash
# Sets up, builds and runs every test (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${PAGELLM_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 900
