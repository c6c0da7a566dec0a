#!/usr/bin/env bash
# The CUDA check on the GPU machine (nvcc, CMake and Ninja there; no network and none of this
# project's -dev packages): unpacks the Debian 12 packages of .debs/ (scripts/fetch-gpu-debs.sh, run
# where there is network; carry `.debs` with the device call) into a private prefix, builds the CUDA
# configuration, runs the CUDA kernel tests and the golden fixtures through the CUDA backend, times
# `pagellm generate --device cuda` on a random Qwen3-0.6B-shaped model at batch 1, and prints a short
# table last. Logs go to $OUT (or /tmp/gpu-check) when set.
#
#   scripts/gpu-check.sh                 # everything
#   GPU_CHECK_SKIP_BENCH=1 scripts/gpu-check.sh   # build and tests only
#   GPU_CHECK_W1_SYNC_LEVELS="1 128" ...         # W1 again with --no-async-scheduling
#   GPU_CHECK_CXXFLAGS='-include random' ...      # extra C++ flags (e.g. to get past a missing include
#                                                 # that the GPU machine's newer g++ does not forgive)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
build=${PAGELLM_GPU_BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
summary=()
note() { summary+=("$1"); echo "== $1"; }

# ----- dependencies ---------------------------------------------------------------------------
source scripts/gpu-deps.sh
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
pkg_config=${PKG_CONFIG:-$(command -v pkg-config)}
echo "host: $(uname -m), $(. /etc/os-release 2>/dev/null; echo "$PRETTY_NAME"), $(g++ --version 2>/dev/null | head -1), $("$nvcc" --version | tail -1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt"
gpu_name=$(head -1 "$out/gpu.txt" 2>/dev/null | cut -d, -f1)

# ----- build ----------------------------------------------------------------------------------
# GPU_CHECK_PREBUILT=1: use binaries built elsewhere with the same configuration (carried in
# $build: src/pagellm, tests/test_kernels, tests/test_golden) and skip the build.
if [ -n "${GPU_CHECK_PREBUILT:-}" ]; then
  built=()
  for target in test_kernels test_golden pagellm; do
    binary="$build/tests/$target"; [ "$target" = pagellm ] && binary="$build/src/pagellm"
    if [ -x "$binary" ]; then built+=("$target"); note "prebuilt $target: $(stat -c %s "$binary") bytes"; else note "prebuilt $target: MISSING"; fi
  done
  export PAGELLM_SOURCE_DIR="$root"  # the golden tests' fixtures (tests/golden/golden_util.cpp)
  has() { [[ " ${built[*]} " == *" $1 "* ]]; }
fi
if [ -z "${GPU_CHECK_PREBUILT:-}" ]; then
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DPKG_CONFIG_EXECUTABLE="$pkg_config" -DCMAKE_CXX_FLAGS="${GPU_CHECK_CXXFLAGS:-}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; note "configure FAILED (see configure.log)"; printf '%s\n' "${summary[@]}"; exit 1; }
built=()
for target in test_kernels test_golden pagellm; do
  start=$(date +%s)
  if cmake --build "$build" -j"$jobs" --target "$target" >"$out/build_$target.log" 2>&1; then
    built+=("$target")
    note "build $target: ok ($(( $(date +%s) - start )) s)"
  else
    grep -E "error|FAILED" "$out/build_$target.log" | head -15
    note "build $target: FAILED (see build_$target.log)"
  fi
done
has() { [[ " ${built[*]} " == *" $1 "* ]]; }
fi

# ----- transformers' hybrid fixture expectations (GPU_CHECK_HF_HYBRID=1), on the CPU beside the tests
hf_pid=
if [ -n "${GPU_CHECK_HF_HYBRID:-}" ]; then
  (python3 tools/hf_golden_hybrid.py --out "$out/hybrid" --expected-only >"$out/hf_hybrid.log" 2>&1) &
  hf_pid=$!
fi

# ----- tests ----------------------------------------------------------------------------------
run_tests() {  # binary filter name: 8 shards in parallel (the f64 reference runs on the CPU)
  local log="$out/$3.log" shards=8 rc=0
  for i in $(seq 0 $((shards - 1))); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$build/tests/$1" --gtest_filter="$2" >"$log.$i" 2>&1 &
  done
  for pid in $(jobs -p); do wait "$pid" || rc=$?; done
  cat "$log".* >"$log" && rm -f "$log".*
  grep -E "^\[  FAILED  \]|Failure|CHECK failed" "$log" | head -20
  local passed=$(grep -cE "^\[       OK \]" "$log") failed=$(grep -cE "^\[  FAILED  \] .*\([0-9]+ ms\)$" "$log")
  local skipped=$(grep -cE "^\[  SKIPPED \] .*\([0-9]+ ms\)$" "$log")
  note "$3: $passed passed, $failed failed, $skipped skipped, rc=$rc (log $3.log)"
  # GPU_CHECK_SANITIZE_ON_FAIL=1: the failed tests again under compute-sanitizer memcheck.
  local sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ "$failed" -gt 0 ] && [ -n "${GPU_CHECK_SANITIZE_ON_FAIL:-}" ] && [ -n "$sanitizer" ]; then
    local names=$(grep -E "^\[  FAILED  \] .*\([0-9]+ ms\)$" "$log" | awk '{print $4}' | tr -d , | head -4 | paste -sd:)
    timeout 180 "$sanitizer" --tool memcheck "$build/tests/$1" --gtest_filter="$names" >"$out/$3_memcheck.log" 2>&1
    note "memcheck of $names: rc=$? $(grep -E 'ERROR SUMMARY' "$out/$3_memcheck.log" | tail -1)"
    grep -m8 -E "Invalid|out of bounds|misaligned|Address" "$out/$3_memcheck.log"
  fi
}
has test_kernels && run_tests test_kernels '*Cuda*' cuda_kernel_tests
has test_golden && run_tests test_golden '*Cuda*' cuda_golden_tests

# ----- batch-1 decode speed -------------------------------------------------------------------
if has pagellm && [ -z "${GPU_CHECK_SKIP_BENCH:-}" ]; then
  model=/tmp/qwen3-0.6b
  # The tokenizer (assets/tokenizers/qwen3, from scripts/setup.sh; carry `assets/tokenizers/qwen3`)
  # is needed by serve; generate works from ids alone.
  tokenizer_flag=(--no-tokenizer)
  [ -f assets/tokenizers/qwen3/tokenizer.json ] && tokenizer_flag=(--tokenizer assets/tokenizers/qwen3)
  [ -f "$model/config.json" ] || "$build/src/pagellm" make-model --preset qwen3-0.6b --out "$model" "${tokenizer_flag[@]}" \
    >"$out/make_model.log" 2>&1 || { tail -5 "$out/make_model.log"; note "make-model FAILED"; }
  prompt=$(seq -s, 1000 1015)  # 16 prompt tokens
  for max_tokens in 16 256; do
    "$build/src/pagellm" generate --model "$model" --device cuda --prompt-ids "$prompt" --max-tokens "$max_tokens" \
      --ignore-eos --temperature 0 --output json >"$out/generate_$max_tokens.json" 2>"$out/generate_$max_tokens.log"
    rc=$?
    tail -2 "$out/generate_$max_tokens.log"
    note "generate --device cuda, batch 1, 16 prompt + $max_tokens new tokens: rc=$rc $(grep -oE '[0-9.]+ tok/s' "$out/generate_$max_tokens.log" | tail -1)"
  done
fi

# ----- W1 (anchors.md): bench serve against serve --device cuda -------------------------------
# start_w1_server PORT LOG [serve flags...]: serves /tmp/qwen3-0.6b (pid in $server), waits for the port.
start_w1_server() {
  local port=$1 log=$2
  shift 2
  "$build/src/pagellm" serve --model /tmp/qwen3-0.6b --device cuda --port "$port" --max-num-seqs 128 \
    --served-model-name qwen3-0.6b "$@" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
}
# w1_level PORT TAG LEVEL LABEL: one W1 run at concurrency LEVEL, logs in $out/w1_${TAG}c$LEVEL.*
# (bench serve also gets the W1_EXTRA_ARGS array).
W1_EXTRA_ARGS=()
w1_level() {
  local port=$1 level=$3 label=$4 log="$out/w1_$2c$3"
  local prompts=$((level == 1 ? 6 : 4 * level))
  timeout "${GPU_CHECK_W1_TIMEOUT:-150}" "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model qwen3-0.6b \
    --tokenizer /tmp/qwen3-0.6b --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos \
    --request-rate inf --max-concurrency "$level" --num-prompts $prompts --no-progress \
    --result-json "$log.json" "${W1_EXTRA_ARGS[@]}" >"$log.log" 2>&1
  local rc=$?
  tail -4 "$log.log"
  note "$label concurrency $level: rc=$rc $(grep -iE 'output token throughput' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median ttft' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median tpot' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'failed' "$log.log" | head -1 | tr -s ' ')"
}
if has pagellm && [ -z "${GPU_CHECK_SKIP_BENCH:-}" ] && [ -f /tmp/qwen3-0.6b/tokenizer.json ]; then
  port=18431
  start_w1_server $port "$out/serve.log"
  for level in ${GPU_CHECK_W1_LEVELS:-1 16 64}; do w1_level $port "" "$level" "W1"; done
  # Soak (GPU_CHECK_SOAK=N): N requests of mixed lengths (prompts 51-972, outputs 12-243 tokens) at
  # concurrency 128 against the same server; then nothing may run, wait or hold a KV block.
  if [ -n "${GPU_CHECK_SOAK:-}" ]; then
    start=$(date +%s)
    timeout "${GPU_CHECK_SOAK_TIMEOUT:-400}" "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model qwen3-0.6b \
      --tokenizer /tmp/qwen3-0.6b --dataset random --random-input-len 512 --random-output-len 128 --random-range-ratio 0.9 \
      --ignore-eos --request-rate inf --max-concurrency 128 --num-prompts "$GPU_CHECK_SOAK" --seed 7 --no-progress \
      --result-json "$out/soak.json" >"$out/soak.log" 2>&1
    rc=$?
    sleep 1
    metrics=$(python3 - "$port" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
values = {m.group(1): m.group(2) for m in re.finditer(r"^pagellm:(\w+)(?:\{[^}]*\})? (\S+)$", text, re.M)}
print(" ".join(f"{k}={values.get(k, '?')}" for k in ("num_requests_running", "num_requests_waiting", "kv_cache_blocks_used")))
PY
)
    note "soak $GPU_CHECK_SOAK requests at concurrency 128: rc=$rc in $(( $(date +%s) - start )) s | $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"completed {j['completed']} failed {j['failed']} output tok/s {j['output_throughput']:.0f}\")" "$out/soak.json" 2>/dev/null) | after: $metrics"
  fi
  kill $server 2>/dev/null; wait $server 2>/dev/null
  tail -3 "$out/serve.log"
  note "serve start-up: $(grep -m1 -oE 'captured [0-9]+ decode graphs.*' "$out/serve.log")"
fi

# ----- W1 without async scheduling (GPU_CHECK_W1_SYNC_LEVELS="1 128"): the same client, side by side -
if has pagellm && [ -n "${GPU_CHECK_W1_SYNC_LEVELS:-}" ] && [ -f /tmp/qwen3-0.6b/tokenizer.json ]; then
  start_w1_server 18433 "$out/serve_sync.log" --no-async-scheduling
  for level in $GPU_CHECK_W1_SYNC_LEVELS; do w1_level 18433 sync_ "$level" "W1 sync (--no-async-scheduling)"; done
  kill $server 2>/dev/null; wait $server 2>/dev/null
fi

# ----- nsys (GPU_CHECK_NSYS=1): a W1 concurrency-64 run under Nsight Systems ---------------------
# The server runs under nsys; after the bench, SIGINT ends it gracefully and nsys writes the report.
# Kernel time per kernel, and the GPU's busy share of the bench's wall time, come back as text.
nsys_bin=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys \
  /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
[ -n "${GPU_CHECK_NSYS:-}" ] && [ -z "$nsys_bin" ] && note "nsys: not found on this machine"
if has pagellm && [ -n "${GPU_CHECK_NSYS:-}" ] && [ -n "$nsys_bin" ] && [ -f /tmp/qwen3-0.6b/tokenizer.json ]; then
  port=18433
  "$nsys_bin" profile --trace cuda --sample none --cpuctxsw none --force-overwrite true -o /tmp/nsys_w1 \
    "$build/src/pagellm" serve --model /tmp/qwen3-0.6b --device cuda --port $port --max-num-seqs 128 \
    --served-model-name qwen3-0.6b >"$out/nsys_serve.log" 2>&1 &
  for _ in $(seq 1 240); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
  level=${GPU_CHECK_NSYS_LEVEL:-64}
  start_ns=$(date +%s%N)
  timeout 150 "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model qwen3-0.6b --tokenizer /tmp/qwen3-0.6b \
    --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos --request-rate inf \
    --max-concurrency "$level" --num-prompts $((4 * level)) --no-progress >"$out/nsys_bench.log" 2>&1
  bench_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
  pkill -INT -f "pagellm serve --model /tmp/qwen3-0.6b --device cuda --port $port" ; wait
  "$nsys_bin" stats --report cuda_gpu_kern_sum --format csv --output "$out/nsys" /tmp/nsys_w1.nsys-rep >"$out/nsys_stats.log" 2>&1
  python3 - "$out/nsys_cuda_gpu_kern_sum.csv" "$bench_ms" <<'PY' || true
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total = sum(float(r["Total Time (ns)"]) for r in rows)
print(f"nsys: {len(rows)} kernels, GPU kernel time {total/1e6:.0f} ms over a {int(sys.argv[2])} ms bench (server start excluded)")
for r in sorted(rows, key=lambda r: -float(r["Total Time (ns)"]))[:12]:
    print(f"  {float(r['Time (%)']):5.1f}%  {float(r['Total Time (ns)'])/1e6:8.1f} ms  x{r['Instances']:>6}  {r['Name'][:70]}")
PY
  note "nsys W1 c$level: $(grep -iE 'output token throughput' "$out/nsys_bench.log" | head -1 | tr -s ' ') (nsys_cuda_gpu_kern_sum.csv)"
fi

# ----- W1 with structured outputs (GPU_CHECK_STRUCTURED_LEVELS="64"): the same level without and then
# with response_format json_object on every request (bench serve --extra-body), one fresh server.
if has pagellm && [ -n "${GPU_CHECK_STRUCTURED_LEVELS:-}" ] && [ -f /tmp/qwen3-0.6b/tokenizer.json ]; then
  port=18434
  start_w1_server $port "$out/serve_structured.log"
  for level in $GPU_CHECK_STRUCTURED_LEVELS; do
    w1_level $port "plain_" "$level" "W1 unconstrained"
    W1_EXTRA_ARGS=(--extra-body '{"response_format": {"type": "json_object"}}')
    w1_level $port "json_" "$level" "W1 response_format json_object"
    W1_EXTRA_ARGS=()
  done
  kill $server 2>/dev/null; wait $server 2>/dev/null
fi

# ----- W1 on other families' shapes (GPU_CHECK_PRESETS="llama3.2-1b gemma3-1b", levels in
# GPU_CHECK_PRESET_LEVELS, default "1 128"): make-model PRESET with its family's tokenizer, serve, W1.
if has pagellm && [ -n "${GPU_CHECK_PRESETS:-}" ]; then
  port=18433
  for preset in $GPU_CHECK_PRESETS; do
    model=/tmp/$preset
    [ -f "$model/config.json" ] || "$build/src/pagellm" make-model --preset "$preset" --out "$model" \
      >"$out/make_model_$preset.log" 2>&1 || { tail -5 "$out/make_model_$preset.log"; note "make-model $preset FAILED"; continue; }
    "$build/src/pagellm" serve --model "$model" --device cuda --port $port --max-num-seqs 128 --served-model-name "$preset" \
      >"$out/serve_$preset.log" 2>&1 &
    server=$!
    for _ in $(seq 1 240); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
    grep -E "KV cache|blocks" "$out/serve_$preset.log" | head -3
    for level in ${GPU_CHECK_PRESET_LEVELS:-1 128}; do
      prompts=$((level == 1 ? 6 : 4 * level))
      log="$out/w1_${preset}_c$level"
      timeout "${GPU_CHECK_W1_TIMEOUT:-150}" "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model "$preset" \
        --tokenizer "$model" --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos \
        --request-rate inf --max-concurrency $level --num-prompts $prompts --no-progress \
        --result-json "$log.json" >"$log.log" 2>&1
      rc=$?
      note "W1 $preset concurrency $level: rc=$rc $(grep -iE 'output token throughput' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median ttft' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median tpot' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'failed' "$log.log" | head -1 | tr -s ' ')"
    done
    kill $server 2>/dev/null; wait $server 2>/dev/null
    rm -rf "$model"  # disk: the next preset's checkpoint
  done
fi

# ----- W1 on the Qwen3.5-0.8B shape (GPU_CHECK_QWEN35_LEVELS="1 64") ---------------------------
if has pagellm && [ -n "${GPU_CHECK_QWEN35_LEVELS:-}" ] && [ -f assets/tokenizers/qwen3/tokenizer.json ]; then
  model=/tmp/qwen3.5-0.8b
  [ -f "$model/config.json" ] || "$build/src/pagellm" make-model --preset qwen3.5-0.8b --out "$model" --tokenizer assets/tokenizers/qwen3 \
    >"$out/make_model_qwen35.log" 2>&1 || { tail -5 "$out/make_model_qwen35.log"; note "make-model qwen3.5-0.8b FAILED"; }
  port=18432
  "$build/src/pagellm" serve --model "$model" --device cuda --port $port --max-num-seqs 128 --served-model-name qwen3.5-0.8b \
    >"$out/serve_qwen35.log" 2>&1 &
  server=$!
  for _ in $(seq 1 120); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
  for level in $GPU_CHECK_QWEN35_LEVELS; do
    prompts=$((level == 1 ? 6 : 4 * level))
    timeout "${GPU_CHECK_W1_TIMEOUT:-150}" "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model qwen3.5-0.8b \
      --tokenizer assets/tokenizers/qwen3 --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos \
      --request-rate inf --max-concurrency $level --num-prompts $prompts --no-progress \
      --result-json "$out/w1_qwen35_c$level.json" >"$out/w1_qwen35_c$level.log" 2>&1
    rc=$?
    note "W1 qwen3.5-0.8b concurrency $level: rc=$rc $(grep -iE 'output token throughput' "$out/w1_qwen35_c$level.log" | head -1 | tr -s ' ') | $(grep -iE 'median ttft' "$out/w1_qwen35_c$level.log" | head -1 | tr -s ' ') | $(grep -iE 'median tpot' "$out/w1_qwen35_c$level.log" | head -1 | tr -s ' ') | $(grep -iE 'failed' "$out/w1_qwen35_c$level.log" | head -1 | tr -s ' ')"
  done
  kill $server 2>/dev/null; wait $server 2>/dev/null
  tail -3 "$out/serve_qwen35.log"
  # In-process prefill of one 512-token prompt with the chunked and the recurrent delta-rule kernels.
  for chunked in 1 0; do
    PAGELLM_CUDA_GDN_CHUNKED=$chunked timeout 120 "$build/src/pagellm" bench latency --model "$model" --device cuda --batch-size 1 \
      --input-len 512 --output-len 16 --output json >"$out/latency_qwen35_chunked$chunked.json" 2>"$out/latency_qwen35_chunked$chunked.log"
    note "qwen3.5-0.8b bench latency 512+16, PAGELLM_CUDA_GDN_CHUNKED=$chunked: rc=$? $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"prefill {j['prefill_ms']:.2f} ms, decode step p50 {j['decode_step_p50_ms']:.3f} ms\")" "$out/latency_qwen35_chunked$chunked.json" 2>/dev/null)"
  done
fi

# ----- profile (GPU_CHECK_PROFILE=1): decode step times with and without graphs, ncu per kernel --
# bench latency times prefill and decode steps in-process (no HTTP). ncu (graphs off, so each kernel
# is its own launch) times the kernels of two decode steps, skipping prefill and warm-up: with
# ~260 launches per step of the 28-layer model, --launch-skip 26000 lands well inside the decode.
if has pagellm && [ -n "${GPU_CHECK_PROFILE:-}" ] && [ -f /tmp/qwen3-0.6b/config.json ]; then
  for batch in ${GPU_CHECK_PROFILE_BATCHES:-1 64 128}; do
    for graphs in ${GPU_CHECK_PROFILE_GRAPHS:-1 0}; do
      PAGELLM_CUDA_GRAPHS=$graphs timeout 60 "$build/src/pagellm" bench latency --model /tmp/qwen3-0.6b --device cuda \
        --batch-size "$batch" --input-len 512 --output-len 64 --max-num-seqs 256 --output json \
        >"$out/latency_b${batch}_g$graphs.json" 2>"$out/latency_b${batch}_g$graphs.log"
      note "bench latency batch $batch graphs=$graphs: rc=$? $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print({k: (round(v,5) if isinstance(v,float) else v) for k,v in j.items() if not isinstance(v,(list,dict))})" "$out/latency_b${batch}_g$graphs.json" 2>/dev/null | cut -c1-400)"
    done
  done
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for batch in ${GPU_CHECK_NCU_BATCHES:-1 128}; do
    [ -n "$ncu_bin" ] || { note "ncu not found"; break; }
    PAGELLM_CUDA_GRAPHS=0 timeout 100 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum \
      --launch-skip "${GPU_CHECK_NCU_SKIP:-26000}" --launch-count 520 --print-summary per-kernel --print-units base --print-kernel-base function --csv \
      "$build/src/pagellm" bench latency --model /tmp/qwen3-0.6b --device cuda --batch-size "$batch" --input-len 512 \
      --output-len 120 --max-num-seqs 256 >"$out/ncu_b$batch.csv" 2>"$out/ncu_b$batch.log"
    note "ncu batch $batch: rc=$? (ncu_b$batch.csv)"
    python3 scripts/ncu_summary.py "$out/ncu_b$batch.csv" "2 decode steps at batch $batch" || true
  done
fi

if [ -n "$hf_pid" ]; then
  wait "$hf_pid"
  note "hf_golden_hybrid --expected-only: rc=$? $(grep -E 'ok|FAILED' "$out/hf_hybrid.log" | tr '\n' ' ' | cut -c1-300)"
fi

# ----- ncu of one prefill step (GPU_CHECK_NCU_PREFILL=1): bench latency's warm-up prefill ---------
# Batch 64 x 512 tokens of the 0.6B shape, and one 512-token prompt of the Qwen3.5-0.8B shape (when
# that model exists): the first launches of bench latency are its warm-up round's prefill step.
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if has pagellm && [ -n "${GPU_CHECK_NCU_PREFILL:-}" ] && [ -n "$ncu_bin" ]; then
  for spec in "qwen3-0.6b 64 300" "qwen3.5-0.8b 1 420"; do
    read -r name batch launches <<<"$spec"
    [ -f "/tmp/$name/config.json" ] || continue
    PAGELLM_CUDA_GRAPHS=0 timeout 150 "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --launch-count "$launches" \
      --print-summary per-kernel --print-units base --print-kernel-base function --csv \
      "$build/src/pagellm" bench latency --model "/tmp/$name" --device cuda --batch-size "$batch" --input-len 512 --output-len 1 \
      >"$out/ncu_prefill_$name.csv" 2>"$out/ncu_prefill_$name.log"
    note "ncu prefill $name batch $batch: rc=$? (ncu_prefill_$name.csv)"
    python3 scripts/ncu_summary.py "$out/ncu_prefill_$name.csv" "prefill of $batch x 512 tokens, $name" || true
  done
fi

# ----- quantized checkpoints and KV cache (GPU_CHECK_QUANT="bf16 kvfp8 fp8 awq gptq") -------------
# make-model GPU_CHECK_QUANT_PRESET (default qwen3-8b) once per weight format (bf16, or --quantize
# fp8/awq/gptq; kvfp8 = the bf16 checkpoint served with --kv-cache-dtype fp8), serve it, W1 at
# GPU_CHECK_QUANT_LEVELS (default "1 128"); the KV block count of each server's start-up log beside.
if has pagellm && [ -n "${GPU_CHECK_QUANT:-}" ] && [ -f assets/tokenizers/qwen3/tokenizer.json ]; then
  port=18435
  preset=${GPU_CHECK_QUANT_PRESET:-qwen3-8b}
  for variant in $GPU_CHECK_QUANT; do
    format=$variant serve_flags=()
    [ "$variant" = kvfp8 ] && { format=bf16; serve_flags=(--kv-cache-dtype fp8); }
    model=/tmp/quant_$format
    if [ ! -f "$model/config.json" ]; then
      rm -rf /tmp/quant_*  # disk: one checkpoint at a time
      quantize=(); [ "$format" != bf16 ] && quantize=(--quantize "$format")
      start=$(date +%s)
      "$build/src/pagellm" make-model --preset "$preset" --out "$model" --tokenizer assets/tokenizers/qwen3 "${quantize[@]}" \
        >"$out/make_model_quant_$format.log" 2>&1 || { tail -3 "$out/make_model_quant_$format.log"; note "make-model $preset $format FAILED"; continue; }
      note "make-model $preset $format: $(du -sh "$model" | cut -f1) in $(( $(date +%s) - start )) s"
    fi
    "$build/src/pagellm" serve --model "$model" --device cuda --port $port --max-num-seqs 128 --served-model-name "$preset" \
      "${serve_flags[@]}" >"$out/serve_quant_$variant.log" 2>&1 &
    server=$!
    for _ in $(seq 1 360); do (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.5; done
    note "serve $preset $variant: $(grep -m1 -iE 'KV cache.*blocks|blocks of' "$out/serve_quant_$variant.log" | cut -c1-200)"
    for level in ${GPU_CHECK_QUANT_LEVELS:-1 128}; do
      prompts=$((level == 1 ? 6 : 4 * level))
      log="$out/w1_quant_${variant}_c$level"
      timeout "${GPU_CHECK_W1_TIMEOUT:-150}" "$build/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model "$preset" \
        --tokenizer "$model" --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos \
        --request-rate inf --max-concurrency $level --num-prompts $prompts --no-progress --result-json "$log.json" >"$log.log" 2>&1
      rc=$?
      note "W1 $preset $variant concurrency $level: rc=$rc $(grep -iE 'output token throughput' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median ttft' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'median tpot' "$log.log" | head -1 | tr -s ' ') | $(grep -iE 'failed' "$log.log" | head -1 | tr -s ' ')"
    done
    kill $server 2>/dev/null; wait $server 2>/dev/null
    tail -2 "$out/serve_quant_$variant.log"
  done
  rm -rf /tmp/quant_*
fi

# ----- batch invariance (GPU_CHECK_INVARIANCE=1): one prompt alone and as 64 copies in one batch ----
if has pagellm && [ -n "${GPU_CHECK_INVARIANCE:-}" ] && [ -f /tmp/qwen3-0.6b/config.json ]; then
  python3 -c "import json,random; r=random.Random(5); p=[r.randrange(1000,100000) for _ in range(200)]; print(json.dumps({'prompt_ids': p}))" >/tmp/inv1.jsonl
  for _ in $(seq 64); do cat /tmp/inv1.jsonl; done >/tmp/inv64.jsonl
  for n in 1 64; do
    "$build/src/pagellm" generate --model /tmp/qwen3-0.6b --device cuda --prompts-file /tmp/inv$n.jsonl --max-tokens 128 \
      --ignore-eos --temperature 0 --output json >"$out/invariance_$n.json" 2>"$out/invariance_$n.log"
  done
  note "batch invariance (bf16 0.6B, 200-token prompt, 128 greedy tokens): $(python3 - "$out/invariance_1.json" "$out/invariance_64.json" <<'PY'
import json, sys
lines = lambda path: [json.loads(line) for line in open(path) if line.strip()]  # generate's JSON lines
alone = lines(sys.argv[1])[0]["token_ids"]
batch = [o["token_ids"] for o in lines(sys.argv[2])]
same = sum(1 for b in batch if b == alone)
first = [next((i for i, (x, y) in enumerate(zip(alone, b)) if x != y), len(alone)) for b in batch]
print(f"{same} of {len(batch)} batched copies equal the alone run; first difference at token {min(first)} (median {sorted(first)[len(first)//2]}); {len(set(map(tuple, batch)))} distinct outputs in the batch")
PY
)"
fi

echo
echo "## gpu-check $(date -u +%Y-%m-%d) on ${gpu_name:-unknown GPU}"
printf '%s\n' "${summary[@]}"
