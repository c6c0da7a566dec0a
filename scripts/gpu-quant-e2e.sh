#!/usr/bin/env bash
# W1 (random 512 in + 128 out, --ignore-eos) on the Qwen3-8B shape with quantized weights and KV cache,
# for docs/PERFORMANCE.md's quantization rows, on prebuilt binaries (scripts/gpu-pack.sh) on a GPU
# machine. Checkpoints from make-model (random weights, the Qwen3 tokenizer), written side by side:
# bf16, --quantize fp8 (e4m3, 128 x 128 blocks, as Qwen3-*-FP8) and --quantize awq. Variants: bf16,
# fp8 and awq serve their checkpoints; fp8online serves the bf16 one with --quantization fp8 (quantized
# as it loads: ~90 s on an H100 host); kvfp8 serves bf16 with --kv-cache-dtype fp8. Each variant:
# `serve --max-num-seqs 128`, then `bench serve` at each level of its list.
#
#   PAGELLM_BIN=build-cuda/src/pagellm OUT=/tmp/logs bash scripts/gpu-quant-e2e.sh
#   QUANT_E2E_VARIANTS="bf16:1,128 fp8:1,128 awq:1,128 kvfp8:1,128" (default), QUANT_E2E_PROMPTS_PER_SLOT=2,
#   QUANT_E2E_MAKE_ONLY=1 (write the checkpoints and stop)
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${PAGELLM_BIN:-build-cuda/src/pagellm}
out=${OUT:-/tmp/quant-e2e}
tok=assets/tokenizers/qwen3
port=18461
mkdir -p "$out"

make_checkpoint() {  # format (bf16 | fp8 | awq)
  local dir=/tmp/quant_e2e_$1 start
  [ -f "$dir/config.json" ] && return 0
  start=$(date +%s)
  local quantize=()
  [ "$1" != bf16 ] && quantize=(--quantize "$1")
  "$bin" make-model --preset qwen3-8b --out "$dir" --tokenizer "$tok" "${quantize[@]}" >"$out/make_$1.log" 2>&1
  echo "make-model qwen3-8b $1: rc=$? $(du -sh "$dir" | cut -f1) in $(($(date +%s) - start)) s"
}

run_variant() {  # variant levels (comma-separated)
  local variant=$1 levels=${2//,/ } model=/tmp/quant_e2e_bf16 flags=()
  case $variant in
    kvfp8) flags=(--kv-cache-dtype fp8) ;;
    fp8online) flags=(--quantization fp8) ;;
    fp8 | awq) model=/tmp/quant_e2e_$variant ;;
  esac
  "$bin" serve --model "$model" --device cuda --port $port --max-num-seqs 128 --served-model-name qwen3-8b \
    "${flags[@]}" >"$out/serve_$variant.log" 2>&1 &
  local server=$! start
  start=$(date +%s)
  for _ in $(seq 1 360); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
  echo "serve $variant: up in $(($(date +%s) - start)) s; $(grep -m1 -iE 'KV cache.*blocks|blocks of' "$out/serve_$variant.log" | cut -c1-160)"
  for level in $levels; do
    local log="$out/w1_${variant}_c$level" prompts=$((level == 1 ? 6 : ${QUANT_E2E_PROMPTS_PER_SLOT:-2} * level))
    timeout 150 "$bin" bench serve --base-url "http://127.0.0.1:$port" --model qwen3-8b --tokenizer "$model" \
      --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos --request-rate inf \
      --max-concurrency "$level" --num-prompts $prompts --no-progress --result-json "$log.json" >"$log.log" 2>&1
    echo "W1 $variant c$level: rc=$? $(grep -iE 'output token throughput' "$log.log" | head -1 | tr -s ' ') |" \
      "$(grep -iE 'median tpot' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median ttft' "$log.log" | head -1 | tr -s ' ') |" \
      "$(grep -iE 'P99 ttft' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'failed' "$log.log" | head -1 | tr -s ' ')"
  done
  kill $server 2>/dev/null
  wait $server 2>/dev/null
}

variants=${QUANT_E2E_VARIANTS:-bf16:1,128 fp8:1,128 awq:1,128 kvfp8:1,128}
# The checkpoints the variants read, written at once (make-model is CPU-bound and single-threaded).
for format in bf16 fp8 awq; do
  case " $variants " in
    *" $format:"*) make_checkpoint "$format" & ;;
    *" fp8online:"* | *" kvfp8:"*) [ "$format" = bf16 ] && make_checkpoint bf16 & ;;
  esac
done
wait
[ -n "${QUANT_E2E_MAKE_ONLY:-}" ] && exit 0
for spec in $variants; do
  run_variant "${spec%%:*}" "${spec#*:}"
done
