#!/usr/bin/env bash
# Builds the CUDA configuration here (nvcc, no GPU needed; sm_90a) and packs what a GPU machine call
# needs into the git-ignored .carry/: bin.tar.xz (pagellm, test_kernels, test_golden, stripped of
# debug info) and tok.tar.xz (assets/tokenizers). The GPU machine then skips the build:
#
#   scripts/gpu-pack.sh                     # here
#   device call, carrying .debs and .carry:  bash scripts/gpu-run.sh      (GPU_CHECK_* as wanted)
#
# Saves the build minutes of every device call (the device time is the scarce part). The binaries
# link the Debian 12 libraries that scripts/gpu-deps.sh unpacks there from .debs/.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGELLM_GPU_BUILD_DIR:-build-cuda}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "gpu-pack: no nvcc (install the CUDA toolkit)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
# PAGELLM_GPU_PACK_EXTRA names more test binaries to carry (e.g. test_e2e for scripts/gpu-tp.sh).
extra=(${PAGELLM_GPU_PACK_EXTRA:-})
cmake --build "$build" --target pagellm test_kernels test_golden "${extra[@]}" -j"$(nproc)"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$build/src" "$stage/$build/tests" .carry
cp "$build/src/pagellm" "$stage/$build/src/"
cp "$build/tests/test_kernels" "$build/tests/test_golden" "$stage/$build/tests/"
for target in "${extra[@]}"; do cp "$build/tests/$target" "$stage/$build/tests/"; done
strip --strip-debug "$stage/$build/src/pagellm" "$stage/$build/tests/"*
tar -C "$stage" -cJf .carry/bin.tar.xz "$build"
[ -d assets/tokenizers ] && tar -C assets -cJf .carry/tok.tar.xz tokenizers
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >>.git/info/exclude
ls -la .carry/
echo "gpu-pack: carry .debs and .carry; on the GPU machine run: bash scripts/gpu-run.sh"
