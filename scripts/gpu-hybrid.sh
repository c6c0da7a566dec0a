#!/usr/bin/env bash
# Issue #17's Qwen3.5 rows (and #16's multi-turn chat) on a GPU machine, on prebuilt binaries
# (scripts/gpu-pack.sh), optionally beside an older binary in the same call (the cards differ from
# call to call: compare only within one). make-model's qwen3.5-0.8b preset, random bf16 weights.
#
#   PAGELLM_BIN=build-cuda/src/pagellm [HYBRID_OLD_BIN=/tmp/old/pagellm] OUT=/tmp/logs bash scripts/gpu-hybrid.sh
#
#   HYBRID_STEPS: any of "decode prefill w1 multiturn ncu" (default: all but ncu)
#     decode     bench latency, 512 in / 64 out, batches HYBRID_DECODE_BATCHES (1 64): the decode step
#     prefill    bench latency, 512 in, batches HYBRID_PREFILL_BATCHES (1 8 16): the prefill time
#     w1         serve + bench serve W1 (512 in / 128 out, ignore_eos) at HYBRID_W1_LEVELS (1 128)
#     multiturn  #16's chat: 16 conversations x 10 turns, 2,000-token shared system prompt, c8,
#                prefix caching on, then off (new binary only)
#     ncu        GPU time per kernel of one eager forward of HYBRID_NCU_BATCH (8) x 512 tokens
#   HYBRID_PRESET=qwen3.5-0.8b, HYBRID_DEVICE=cuda (cpu: a smoke run of the script, e.g. with
#   HYBRID_PRESET=qwen3.5-micro HYBRID_STEPS="decode prefill"; the micro vocabulary is too small for the
#   Qwen3 tokenizer's prompts of w1 and multiturn)
set -uo pipefail
cd "$(dirname "$0")/.."
new=${PAGELLM_BIN:-build-cuda/src/pagellm}
old=${HYBRID_OLD_BIN:-}
out=${OUT:-/tmp/hybrid}
preset=${HYBRID_PRESET:-qwen3.5-0.8b}
device=${HYBRID_DEVICE:-cuda}
steps=" ${HYBRID_STEPS:-decode prefill w1 multiturn} "
tok=assets/tokenizers/qwen3
model=/tmp/hybrid_$preset
port=18472
mkdir -p "$out"
[ -f "$model/config.json" ] || "$new" make-model --preset "$preset" --out "$model" --tokenizer $tok >"$out/make.log" 2>&1
binaries=(new)
[ -n "$old" ] && binaries=(old new)
bin_of() { if [ "$1" = old ]; then echo "$old"; else echo "$new"; fi; }

latency() {  # which batch output_len
  "$(bin_of "$1")" bench latency --model "$model" --device "$device" --input-len 512 --output-len "$3" --max-model-len 4096 \
    --batch-size "$2" 2>&1 | grep -E '^batch' | sed 's/^batch [0-9]*, input [0-9]*, output [0-9]*: //'
}
if [[ $steps == *" decode "* ]]; then
  for b in ${HYBRID_DECODE_BATCHES:-1 64}; do
    for which in "${binaries[@]}"; do echo "decode b$b $which: $(latency $which "$b" 64 | sed 's/.*decode step/decode step/')"; done
  done
fi
if [[ $steps == *" prefill "* ]]; then
  for b in ${HYBRID_PREFILL_BATCHES:-1 8 16}; do
    for which in "${binaries[@]}"; do echo "prefill b$b $which: $(latency $which "$b" 4 | sed 's/; decode.*//')"; done
  done
fi

start_server() {  # binary log flags...
  local bin=$1 log=$2
  shift 2
  "$bin" serve --model "$model" --device "$device" --port $port --max-num-seqs 128 --tokenizer $tok --served-model-name q \
    "$@" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 360); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
}
stop_server() {
  kill -INT $server 2>/dev/null
  wait $server 2>/dev/null
}
if [[ $steps == *" w1 "* ]]; then
  for which in "${binaries[@]}"; do
    bin=$(bin_of $which)
    start_server "$bin" "$out/serve_w1_$which.log"
    for c in ${HYBRID_W1_LEVELS:-1 128}; do
      n=$((c == 1 ? 8 : 4 * c))
      timeout 300 "$bin" bench serve --base-url "http://127.0.0.1:$port" --model q --tokenizer $tok --dataset random \
        --random-input-len 512 --random-output-len 128 --ignore-eos --request-rate inf --max-concurrency "$c" \
        --num-prompts $n --percentiles 50,99 --no-progress >"$out/w1_${which}_c$c.log" 2>&1
      echo "W1 c$c $which: $(grep -iE 'failed requests|output token throughput \(|median ttft|p99 ttft|median tpot' \
        "$out/w1_${which}_c$c.log" | tr -s ' ' | tr '\n' ';')"
    done
    stop_server
  done
fi
if [[ $steps == *" multiturn "* ]]; then
  for mode in on off; do
    flags=()
    [ $mode = off ] && flags=(--no-enable-prefix-caching)
    start_server "$new" "$out/serve_mt_$mode.log" "${flags[@]}"
    timeout 400 "$new" bench serve --base-url "http://127.0.0.1:$port" --model q --tokenizer $tok \
      --endpoint /v1/chat/completions --dataset multi-turn --num-prompts 16 --multi-turn-turns 10 \
      --multi-turn-system-len 2000 --random-input-len 256 --random-output-len 64 --ignore-eos --max-concurrency 8 \
      --no-progress >"$out/mt_$mode.log" 2>&1
    echo "multi-turn caching $mode: $(grep -iE 'failed requests|request throughput|mean ttft|median ttft|p99 ttft' \
      "$out/mt_$mode.log" | tr -s ' ' | tr '\n' ';')"
    stop_server
  done
fi
if [[ $steps == *" ncu "* ]]; then
  ncu_bin=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  timeout 500 "$ncu_bin" --clock-control none --kernel-name-base function --metrics gpu__time_duration.sum --csv \
    --page raw "$new" bench latency --model "$model" --device "$device" --input-len 512 --output-len 1 \
    --max-model-len 4096 --batch-size "${HYBRID_NCU_BATCH:-8}" --enforce-eager >"$out/ncu_prefill.csv" 2>"$out/ncu.err"
  # The last forward that ran the chunked delta rule: from its first launch (the token embedding,
  # the last embedding launch before its last prep) to its head (the rows' gather is the next
  # embedding launch; the head's product and the sampling follow it).
  python3 - "$out/ncu_prefill.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 3]
head = next((r for r in rows if "Kernel Name" in r), None)
if head is None:
    sys.exit("ncu: no kernel rows")
ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
launches = []
for r in rows[rows.index(head) + 1:]:
    try:
        launches.append((r[ki].split("(")[0].replace("void pagellm::<unnamed>::", "")[:60], float(r[ti].replace(",", ""))))
    except (ValueError, IndexError):
        pass
preps = [i for i, (name, _) in enumerate(launches) if "chunk_prep" in name]
if not preps:
    sys.exit("ncu: no chunked prefill in the run")
embeddings = [i for i, (name, _) in enumerate(launches) if name.startswith("embedding_kernel")]
start = max((i for i in embeddings if i < preps[-1]), default=0)
gather = min((i for i in embeddings if i > preps[-1]), default=len(launches) - 4)
window = launches[start:gather + 4]
total, count = collections.Counter(), collections.Counter()
for name, ns in window:
    total[name] += ns
    count[name] += 1
print(f"ncu: one forward, {sum(total.values()) / 1e6:.1f} ms of kernels")
for name, ns in total.most_common(15):
    print(f"  {ns / 1e3:9.1f} us  x{count[name]:4d}  {ns / 1e3 / count[name]:8.1f} us each  {name}")
PY
fi
