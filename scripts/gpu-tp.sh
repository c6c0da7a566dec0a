#!/usr/bin/env bash
# Tensor parallelism on a machine with two or more GPUs (the device kinds nvidia-h100-x2 /
# nvidia-h200-x2), on the binaries scripts/gpu-pack.sh built here (PAGELLM_GPU_PACK_EXTRA=test_e2e):
#
#   GPU_TP_TESTS=1   the collectives' kernel tests (peer memory, NCCL), the golden fixtures with a GPU
#                    per rank, and the e2e tests of GPU ranks as processes
#   GPU_TP_PERF="qwen3-8b"  W1 (bench serve, 512 in / 128 out) at GPU_TP_LEVELS (default "1 128") for
#                    each preset at --tensor-parallel-size 1 and 2 (GPU_TP_SIZES), same client
#   GPU_TP_PROCS_PERF=qwen3-8b  W1 at GPU_TP_PROCS_LEVELS (default 1) with the ranks as two processes,
#                    over NCCL as it chooses (NVLink) and forced onto sockets (GPU_TP_PROCS_MODES)
#
# Logs are packed into $OUT/tp.tgz; the summary table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
result=${OUT:-/tmp/gpu-tp}
out=/tmp/gpu-tp-logs
mkdir -p "$out" "$result" assets
tar -xJf .carry/bin.tar.xz && tar -xJf .carry/tok.tar.xz -C assets
source scripts/gpu-deps.sh >/dev/null
# NCCL comes with PyTorch's wheels on the GPU machine.
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$nccl_lib" ] && export LD_LIBRARY_PATH="$nccl_lib:$LD_LIBRARY_PATH"
export NCCL_NVLS_ENABLE=0 PAGELLM_SOURCE_DIR="$root"
# The test binaries name the paths they were built at: the same tree, seen from there.
[ -e /work/main ] || { mkdir -p /work && ln -s "$root" /work/main; }
b=build-cuda
summary=()
note() { summary+=("$1"); echo "== $1"; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/gpus.txt"
nvidia-smi topo -m >"$out/topo.txt" 2>&1
note "GPUs: $(wc -l <"$out/gpus.txt") x $(head -1 "$out/gpus.txt" | cut -d, -f2); link GPU0-GPU1: $(awk '$1=="GPU0"{print $3}' "$out/topo.txt")"

gtest() {  # binary filter name
  local log="$out/$3.log"
  timeout "${GPU_TP_TEST_TIMEOUT:-300}" "$b/tests/$1" --gtest_filter="$2" >"$log" 2>&1
  local rc=$?
  grep -E "^\[  FAILED  \]|Failure|CHECK failed|error:" "$log" | head -12
  note "$3: $(grep -cE '^\[       OK \]' "$log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log") failed, $(grep -cE '^\[  SKIPPED \] .*\([0-9]+ ms\)$' "$log") skipped, rc=$rc"
}
if [ -n "${GPU_TP_TESTS:-}" ]; then
  gtest test_kernels 'CudaPeerCommunicator.*:CudaNcclCommunicator.*' kernels_collectives
  gtest test_golden 'CudaGpus/TensorParallelGolden.*' golden_gpu_per_rank
  [ -x "$b/tests/test_e2e" ] && gtest test_e2e 'TensorParallelProcesses.*Gpu*' e2e_gpu_processes
fi

w1() {  # port model-name tokenizer level tag
  local log="$out/w1_$5_c$4" prompts=$(($4 == 1 ? 8 : 4 * $4))
  timeout "${GPU_TP_W1_TIMEOUT:-200}" "$b/src/pagellm" bench serve --base-url "http://127.0.0.1:$1" --model "$2" \
    --tokenizer "$3" --dataset random --random-input-len 512 --random-output-len 128 --ignore-eos \
    --request-rate inf --max-concurrency "$4" --num-prompts $prompts --no-progress --result-json "$log.json" >"$log.log" 2>&1
  local rc=$?
  note "W1 $5 c$4: rc=$rc $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(f\"out {j['output_throughput']:.0f} tok/s, TPOT p50 {j['median_tpot_ms']:.2f} ms, TTFT p50 {j['median_ttft_ms']:.1f} ms p99 {j['p99_ttft_ms']:.0f} ms, failed {j['failed']}\")" "$log.json" 2>/dev/null)"
}
wait_port() { for _ in $(seq 1 600); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.5; done; return 1; }

for preset in ${GPU_TP_PERF:-}; do
  model=/tmp/$preset
  start=$(date +%s)
  "$b/src/pagellm" make-model --preset "$preset" --out "$model" --tokenizer assets/tokenizers/qwen3 >"$out/make_$preset.log" 2>&1 ||
    { tail -3 "$out/make_$preset.log"; note "make-model $preset FAILED"; continue; }
  note "make-model $preset: $(( $(date +%s) - start )) s"
  for tp in ${GPU_TP_SIZES:-1 2}; do
    port=$((18500 + tp))
    "$b/src/pagellm" serve --model "$model" --device cuda --port $port --max-num-seqs 128 --served-model-name "$preset" \
      --tensor-parallel-size "$tp" ${GPU_TP_SERVE_ARGS:-} >"$out/serve_${preset}_tp$tp.log" 2>&1 &
    server=$!
    wait_port $port || { tail -5 "$out/serve_${preset}_tp$tp.log"; note "serve $preset tp $tp did not start"; kill $server; continue; }
    note "serve $preset tp $tp: $(grep -m1 -oE 'KV cache[^;]*' "$out/serve_${preset}_tp$tp.log" | head -1) | $(grep -m1 -oE 'captured [0-9]+ decode graphs[^;]*' "$out/serve_${preset}_tp$tp.log")"
    for level in ${GPU_TP_LEVELS:-1 128}; do w1 $port "$preset" "$model" "$level" "${preset}_tp$tp"; done
    kill $server; wait $server 2>/dev/null
  done
done

for preset in ${GPU_TP_PROCS_PERF:-}; do
  model=/tmp/$preset
  [ -f "$model/config.json" ] || "$b/src/pagellm" make-model --preset "$preset" --out "$model" --tokenizer assets/tokenizers/qwen3 >/dev/null 2>&1
  for mode in ${GPU_TP_PROCS_MODES:-nccl sockets}; do
    env_mode=()
    [ $mode = sockets ] && env_mode=(env NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1)
    port=18600; master=29611
    group=(--device cuda --tensor-parallel-size 2 --nnodes 2 --master-port $master)
    "${env_mode[@]}" "$b/src/pagellm" serve --model "$model" "${group[@]}" --node-rank 1 >"$out/worker_$mode.log" 2>&1 &
    worker=$!
    "${env_mode[@]}" "$b/src/pagellm" serve --model "$model" "${group[@]}" --node-rank 0 --port $port --max-num-seqs 128 \
      --served-model-name "$preset" >"$out/serve_procs_$mode.log" 2>&1 &
    server=$!
    wait_port $port || { tail -5 "$out/serve_procs_$mode.log" "$out/worker_$mode.log"; note "serve over processes ($mode) did not start"; kill $server $worker; continue; }
    for level in ${GPU_TP_PROCS_LEVELS:-1}; do w1 $port "$preset" "$model" "$level" "${preset}_processes_$mode"; done
    kill $server; wait $server 2>/dev/null; sleep 1; kill $worker 2>/dev/null; wait $worker 2>/dev/null
  done
done

tar -czf "$result/tp.tgz" -C "$out" .
echo "## gpu-tp summary"
printf '%s\n' "${summary[@]}"
