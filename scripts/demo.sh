#!/usr/bin/env bash
# Sets up, builds and serves the embedded demo model (Qwen3 tokenizer, tiny random weights) on
# http://127.0.0.1:8000 with the OpenAI API. Extra arguments go to `pagellm serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${PAGELLM_BUILD_DIR:-build}/src/pagellm" serve "$@"
