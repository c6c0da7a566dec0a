#!/usr/bin/env bash
# Issue #17's mixed load on a GPU machine, on prebuilt binaries (scripts/gpu-pack.sh): `bench serve
# --dataset mixed` (8000 / 3000 / 512 / 128 / 64-token prompts alike often, 128 out, --ignore-eos) at
# 256 streams against `pagellm serve`, once per variant of the scheduling flags, each on a fresh
# server. Prints each variant's per-class TTFT / TPOT table (bench serve's "Latency by Prompt Length").
#
#   PAGELLM_BIN=build-cuda/src/pagellm OUT=/tmp/logs bash scripts/gpu-mixed.sh
#   MIXED_PRESET=qwen3-0.6b (default), MIXED_PROMPTS=1000, MIXED_CONCURRENCY=256, MIXED_LENS=8000,3000,512,128,64,
#   MIXED_DEVICE=cuda (cpu: a smoke run of the script, e.g. MIXED_PRESET=qwen3-tiny MIXED_LENS=512,32),
#   MIXED_VARIANTS: ';'-separated flag sets, "default" for none; the default compares FIFO admission
#   with a 2048-token threshold, alone and with concurrent partial prefills (4 prompts, 1 long).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${PAGELLM_BIN:-build-cuda/src/pagellm}
out=${OUT:-/tmp/mixed}
preset=${MIXED_PRESET:-qwen3-0.6b}
model=/tmp/mixed_$preset
port=18471
mkdir -p "$out"
[ -f "$model/config.json" ] ||
  "$bin" make-model --preset "$preset" --out "$model" --tokenizer assets/tokenizers/qwen3 >"$out/make.log" 2>&1
variants=${MIXED_VARIANTS:-"default;--long-prefill-token-threshold 2048;--long-prefill-token-threshold 2048 --max-num-partial-prefills 4 --max-long-partial-prefills 1"}
IFS=';' read -r -a specs <<<"$variants"
for i in "${!specs[@]}"; do
  spec=${specs[$i]}
  flags=()
  [ "$spec" != default ] && read -r -a flags <<<"$spec"
  "$bin" serve --model "$model" --device "${MIXED_DEVICE:-cuda}" --port $port --max-num-seqs 256 --served-model-name mixed \
    "${flags[@]}" >"$out/serve_$i.log" 2>&1 &
  server=$!
  for _ in $(seq 1 360); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
  timeout 500 "$bin" bench serve --base-url "http://127.0.0.1:$port" --model mixed --tokenizer assets/tokenizers/qwen3 \
    --dataset mixed --mixed-input-lens "${MIXED_LENS:-8000,3000,512,128,64}" --num-prompts "${MIXED_PROMPTS:-1000}" --random-output-len 128 --ignore-eos \
    --max-concurrency "${MIXED_CONCURRENCY:-256}" --percentiles 50,99 --no-progress >"$out/mixed_$i.log" 2>&1
  echo "===== $spec: rc=$? $(grep -iE 'failed requests' "$out/mixed_$i.log" | tr -s ' ') |" \
    "$(grep -iE 'output token throughput' "$out/mixed_$i.log" | head -1 | tr -s ' ')"
  sed -n '/Latency by Prompt Length/,/^=====/p' "$out/mixed_$i.log" | sed '1d;$d'
  kill $server 2>/dev/null
  wait $server 2>/dev/null
done
