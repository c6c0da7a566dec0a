#!/usr/bin/env bash
# The GPU machine's side of scripts/gpu-pack.sh: unpacks .carry/ (binaries, tokenizers), runs
# scripts/gpu-check.sh on the prebuilt binaries with logs in a scratch folder, packs every log into
# $OUT/gc.tgz (one file comes back, whatever the number of logs) and prints the summary table.
# Pass GPU_CHECK_* in the environment (e.g. GPU_CHECK_W1_LEVELS="1 64 128" GPU_CHECK_SOAK=5000).
set -uo pipefail
cd "$(dirname "$0")/.."
result=${OUT:-/tmp/gpu-run}
logs=/tmp/gpu-check-logs
mkdir -p assets "$logs" "$result"
tar -xJf .carry/bin.tar.xz && tar -xJf .carry/tok.tar.xz -C assets
export PAGELLM_GPU_BUILD_DIR=${PAGELLM_GPU_BUILD_DIR:-build-cuda} GPU_CHECK_PREBUILT=1 OUT=$logs
export GPU_CHECK_SANITIZE_ON_FAIL=${GPU_CHECK_SANITIZE_ON_FAIL:-1} GPU_CHECK_NCU_BATCHES=${GPU_CHECK_NCU_BATCHES:- }
export GPU_CHECK_PROFILE_GRAPHS=${GPU_CHECK_PROFILE_GRAPHS:-1}
timeout "${GPU_RUN_TIMEOUT:-560}" scripts/gpu-check.sh >"$logs/gpu-check.log" 2>&1
echo "gpu-check rc=$?"
tar -czf "$result/gc.tgz" -C "$logs" .
sed -n '/^## gpu-check/,$p' "$logs/gpu-check.log"
grep -hE "^\[  FAILED  \] .*\([0-9]+ ms\)$" "$logs"/*.log | head -20
