#!/usr/bin/env bash
# Downloads (here, with network) the Debian 12 packages that pagellm builds against into .debs/
# (git-ignored), so that scripts/gpu-check.sh can build on the GPU machine, which has nvcc, CMake
# and Ninja but neither network nor this project's -dev packages. gpu-check.sh unpacks them with
# `dpkg -x` into a private prefix (never into /). Carry `.debs` with the device run call.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  nlohmann-json3-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
  libutf8proc-dev libutf8proc2 libxxhash-dev libxxhash0
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
  libgtest-dev libcli11-dev pkgconf pkgconf-bin libpkgconf3
)
mkdir -p .debs
cd .debs
have=0
for p in "${packages[@]}"; do
  if ls "${p}"_*_amd64.deb "${p}"_*_all.deb >/dev/null 2>&1; then have=$((have + 1)); continue; fi
  apt-get download -qq "${p}:amd64" 2>/dev/null || apt-get download -qq "$p"
done
echo "fetch-gpu-debs: $(ls ./*.deb | wc -l) packages in .debs/ ($(du -sh . | cut -f1)); $have were already there"
