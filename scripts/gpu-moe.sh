#!/usr/bin/env bash
# MoE decode and prefill speed on one GPU, on the binaries scripts/gpu-pack.sh built here:
#
#   GPU_MOE_PRESETS="gpt-oss-20b qwen3-30b-a3b"  checkpoints made with make-model (random weights) in /dev/shm
#   GPU_MOE_BATCHES="1 64"    bench latency batch sizes (512 in / 64 out, in-process)
#   GPU_MOE_NCU="gpt-oss-20b" presets whose decode steps run under Nsight Compute (GPU time per kernel, eager steps)
#   GPU_MOE_NCU_BATCH=1       the batch of those steps (64: nearly every expert chosen in every layer)
#   GPU_MOE_NCU_INPUT=512     the prompt length of those steps: at 16 tokens the decode attention does not
#                             split its keys, so its merge (the largest small kernel at 512) never shows
#   GPU_MOE_SASS="qwen3-30b-a3b"  presets whose first grouped expert GEMM of a 2,048-token prefill step
#                             (moe_gemm_tiled_kernel, batch 4 x 512) runs under Nsight Compute's warp-state
#                             and source counters: stall reasons, instruction mix and the most stalled
#                             SASS instructions (scripts/ncu_sass.py)
#   GPU_MOE_TESTS="CudaMoe.*" a test_kernels filter run first ("" = none)
#   GPU_MOE_GOLDEN="Cuda/FamilyGolden.*moe*"  a test_golden filter run next ("" = none; the default: the
#                             CUDA family goldens of gpt-oss, Qwen3-MoE and Qwen2 (biases), the hybrid
#                             Qwen3-Next MoE fixtures; gtest filters match suite and test names, not
#                             GetParam(), so "Cuda/...", not "cuda/...")
#   GPU_MOE_TILED_MIN_ROWS="0 512"  each bench latency batch once per value of PAGELLM_CUDA_MOE_TILED_MIN_ROWS
#                             (grouped rows from which the tiled expert GEMM runs; 0 = the kernel's own, 2,048)
#   GPU_MOE_W1="64 1"         W1 through serve at these concurrencies (512 in / 128 out, random prompts,
#                             --ignore-eos; 4 x c prompts, 8 at c1), after the latency runs ("" = none)
#   GPU_MOE_SERVE_ARGS="..."  more serve flags for those runs (e.g. --max-num-batched-tokens 8192)
#   GPU_MOE_LAYERS=4          make the checkpoints with this many decoder layers (make-model --num-layers):
#                             minutes less to make and load, per-kernel times unchanged; its TPOTs are
#                             not the full model's ("" = the preset's layers)
#
# Logs are packed into $OUT/moe.tgz; the summary table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
result=${OUT:-/tmp/gpu-moe}
out=/tmp/gpu-moe-logs
mkdir -p "$out" "$result" assets
tar -xJf .carry/bin.tar.xz && tar -xJf .carry/tok.tar.xz -C assets
source scripts/gpu-deps.sh >/dev/null
export PAGELLM_SOURCE_DIR="$root"
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
b=build-cuda
summary=()
note() { summary+=("$1"); echo "== $1"; }
note "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

tests=${GPU_MOE_TESTS-CudaMoe.*}
if [ -n "$tests" ]; then
  timeout 300 "$b/tests/test_kernels" --gtest_filter="$tests" >"$out/tests.log" 2>&1
  grep -E "^\[  FAILED  \]|Failure|bandwidth|GB/s|us " "$out/tests.log" | head -30
  note "test_kernels $tests: $(grep -cE '^\[       OK \]' "$out/tests.log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$out/tests.log") failed"
fi

golden=${GPU_MOE_GOLDEN-Cuda/FamilyGolden.*gpt_oss*:Cuda/FamilyGolden.*qwen3_moe*:Cuda/FamilyGolden.*qwen2_bias*:*Cuda*qwen3_next*}
if [ -n "$golden" ]; then
  timeout 300 "$b/tests/test_golden" --gtest_filter="$golden" >"$out/golden.log" 2>&1
  grep -E "^\[  FAILED  \]|Failure" "$out/golden.log" | head -12
  note "test_golden $golden: $(grep -cE '^\[       OK \]' "$out/golden.log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$out/golden.log") failed"
fi

# One checkpoint at a time in /dev/shm: make-model holds the whole file in memory while it writes it.
for preset in ${GPU_MOE_PRESETS-gpt-oss-20b qwen3-30b-a3b}; do
  start=$(date +%s)
  "$b/src/pagellm" make-model --preset "$preset" --out "/dev/shm/$preset" --tokenizer assets/tokenizers/qwen3 \
    ${GPU_MOE_LAYERS:+--num-layers "$GPU_MOE_LAYERS"} >"$out/make_$preset.log" 2>&1
  note "make-model $preset: rc=$? $(( $(date +%s) - start )) s"
  for batch in ${GPU_MOE_BATCHES-1 64}; do
    input=512
    [ "$preset" = qwen3-30b-a3b ] && [ "$batch" -gt 16 ] && [ -z "${GPU_MOE_LAYERS:-}" ] && input=128  # the 32k-token prefill does not fit beside 57 GB
    for min_rows in ${GPU_MOE_TILED_MIN_ROWS:-0}; do
      log="$out/latency_${preset}_b${batch}_tiled$min_rows.log"
      PAGELLM_CUDA_MOE_TILED_MIN_ROWS=$min_rows timeout 300 "$b/src/pagellm" bench latency --model "/dev/shm/$preset" \
        --input-len $input --output-len 64 --max-model-len 2048 --batch-size "$batch" >"$log" 2>&1
      note "$preset${GPU_MOE_TILED_MIN_ROWS:+ tiled from $min_rows rows}: rc=$? $(grep -E '^batch' "$log" | tail -1)"
    done
  done
  if [ -n "${GPU_MOE_W1:-}" ]; then
    port=18640
    # shellcheck disable=SC2086  # GPU_MOE_SERVE_ARGS is a list of flags
    "$b/src/pagellm" serve --model "/dev/shm/$preset" --device cuda --port $port --max-num-seqs 128 \
      --served-model-name "$preset" ${GPU_MOE_SERVE_ARGS:-} >"$out/serve_$preset.log" 2>&1 &
    server=$!
    # Up to 5 minutes for a full checkpoint to load, but not past the server's exit.
    for _ in $(seq 1 600); do
      (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      kill -0 $server 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 $server 2>/dev/null; then
      for level in $GPU_MOE_W1; do
        json="$out/w1_${preset}_c$level.json"
        timeout 300 "$b/src/pagellm" bench serve --base-url "http://127.0.0.1:$port" --model "$preset" \
          --tokenizer assets/tokenizers/qwen3 --dataset random --random-input-len 512 --random-output-len 128 \
          --ignore-eos --request-rate inf --max-concurrency "$level" --num-prompts $((level == 1 ? 8 : 4 * level)) \
          --no-progress --result-json "$json" >"$out/w1_${preset}_c$level.log" 2>&1
        note "W1 $preset c$level${GPU_MOE_SERVE_ARGS:+ ($GPU_MOE_SERVE_ARGS)}: rc=$? $(python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print(f\"{j['output_throughput']:.0f} output tok/s, TPOT p50 {j['median_tpot_ms']:.2f} ms, TTFT p50 {j['median_ttft_ms']:.1f} ms, p99 {j['p99_ttft_ms']:.0f} ms, failed {j['failed']}\")" "$json" 2>/dev/null)"
      done
      kill $server; wait $server 2>/dev/null
    else
      note "serve $preset did not start: $(tail -2 "$out/serve_$preset.log" | tr '\n' ' ')"
    fi
  fi
  if [[ " ${GPU_MOE_NCU:-} " == *" $preset "* ]]; then
    csv="$out/ncu_$preset.csv"
    PAGELLM_CUDA_GRAPHS=0 timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      "$b/src/pagellm" bench latency --model "/dev/shm/$preset" --input-len "${GPU_MOE_NCU_INPUT:-512}" --output-len 6 \
      --max-model-len $(( ${GPU_MOE_NCU_INPUT:-512} + 256 )) \
      --batch-size "${GPU_MOE_NCU_BATCH:-1}" --kv-cache-memory $(( ${GPU_MOE_NCU_BATCH:-1} > 1 ? 16000000000 : 2000000000 )) >"$csv" 2>"$out/ncu_$preset.err"
    note "ncu $preset, decode batch ${GPU_MOE_NCU_BATCH:-1}: rc=$?"
    python3 scripts/ncu_steps.py "$csv" 3 | tee "$out/ncu_$preset.txt"
  fi
  if [[ " ${GPU_MOE_SASS:-} " == *" $preset "* ]]; then
    timeout 300 ncu --clock-control none --kernel-name regex:moe_gemm_tiled --launch-count 1 --section WarpStateStats \
      --section SourceCounters -o "$out/sass_$preset" "$b/src/pagellm" bench latency --model "/dev/shm/$preset" \
      --input-len 512 --output-len 2 --max-model-len 1024 --batch-size 4 >"$out/sass_$preset.log" 2>&1
    note "ncu source counters $preset: rc=$?"
    ncu -i "$out/sass_$preset.ncu-rep" --page source --csv --print-source sass >"$out/sass_$preset.csv" 2>&1
    python3 scripts/ncu_sass.py "$out/sass_$preset.csv" | tee "$out/sass_$preset.txt"
    rm -f "$out/sass_$preset.ncu-rep"
  fi
  rm -rf "/dev/shm/$preset"
done

tar -C "$out" -czf "$result/moe.tgz" . 2>/dev/null
echo
echo "===== summary ====="
printf '%s\n' "${summary[@]}"
