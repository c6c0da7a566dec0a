#!/usr/bin/env bash
# W1 of ../shared/perf/anchors.md (random dataset, 512 prompt + 128 output tokens, ignore_eos,
# temperature 0, streaming, request rate inf) against `pagellm serve --device cpu`, at the given
# concurrency levels. Prints vLLM-style tables; JSON results go to $OUT_DIR (default /tmp/cpu-w1).
#
#   scripts/cpu-w1.sh [MODEL_DIR|demo] [LEVELS...]        e.g. scripts/cpu-w1.sh demo 1 8
#   W1_NUM_PROMPTS=2 scripts/cpu-w1.sh /tmp/qwen3-0.6b 1 8  # fewer prompts than W1's 4 x concurrency
set -euo pipefail
cd "$(dirname "$0")/.."
pagellm=${PAGELLM_BUILD_DIR:-build}/src/pagellm
model=${1:-demo}
shift || true
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(1 8)
out=${OUT_DIR:-/tmp/cpu-w1}
mkdir -p "$out"
port=${W1_PORT:-18500}
model_args=()
[ "$model" != demo ] && model_args=(--model "$model")
"$pagellm" serve "${model_args[@]}" --served-model-name w1 --port "$port" --max-num-seqs 64 \
  --kv-cache-memory ${W1_KV_BYTES:-2000000000} >"$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.5; done
tokenizer=$(sed -n 's/.*"root": *"\([^"]*\)".*/\1/p' <(curl -s "http://127.0.0.1:$port/v1/models"))
for level in "${levels[@]}"; do
  prompts=${W1_NUM_PROMPTS:-$((level == 1 ? 6 : 4 * level))}
  "$pagellm" bench serve --base-url "http://127.0.0.1:$port" --model w1 --tokenizer "$tokenizer" --dataset random \
    --random-input-len 512 --random-output-len 128 --ignore-eos --request-rate inf --max-concurrency "$level" \
    --num-prompts "$prompts" --seed 0 --no-progress --result-json "$out/w1_c$level.json"
done
