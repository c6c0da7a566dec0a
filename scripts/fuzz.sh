#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ with clang (-fsanitize=fuzzer,address,undefined)
# into build-fuzz/ and runs each for a while. Not part of the default build or of CI.
#
#   scripts/fuzz.sh                     # every harness, FUZZ_SECONDS (default 60) each
#   FUZZ_SECONDS=300 scripts/fuzz.sh tokenizer_json
#   scripts/fuzz.sh --build-only
#
# Harnesses (names for the command line):
#   tokenizer_encode  encode/decode/stream/stop strings with the real tokenizers, run once per family
#                     (FUZZ_FAMILIES, default: qwen3 llama3 gemma3 deepseek_v3 gptoss llama2; each gets
#                     FUZZ_SECONDS); needs assets/tokenizers/ from scripts/setup.sh
#   tokenizer_json    tokenizer.json loading from mutated seed files
#   chat_template     the chat-template parser and interpreter
#   http_request      the HTTP request reader of `pagellm serve` (heads, framing, bodies, pipelining)
#                     over a socketpair
#   openai_request    the OpenAI request parser (completions and chat bodies); what it accepts must
#                     pass SamplingParams::validate
#
# Working corpora grow in build-fuzz/corpus/<name>/ (seeded from tests/fuzz/corpus/<name>/);
# crashes, leaks and timeouts are written to build-fuzz/artifacts/ and make the script fail.
# Reproduce one with: build-fuzz/fuzz_<name> build-fuzz/artifacts/<file>
# Needs clang and its fuzzer runtime (Debian 12: apt-get install -y clang libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
families=${FUZZ_FAMILIES:-"qwen3 llama3 gemma3 deepseek_v3 gptoss llama2"}
jobs=${FUZZ_BUILD_JOBS:-2}
cxx=${CXX_FUZZ:-clang++}
build_only=0
harnesses=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    tokenizer_encode|tokenizer_json|chat_template|http_request|openai_request) harnesses+=("$arg") ;;
    *) echo "fuzz.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
[ ${#harnesses[@]} -gt 0 ] || harnesses=(tokenizer_encode tokenizer_json chat_template http_request openai_request)

if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found (apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 1
fi

flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=undefined -Isrc)
libs=(-lpcre2-8 -lutf8proc -lfmt)
mkdir -p "$out/obj" "$out/artifacts"

# Objects of the sources a harness needs, rebuilt when the source or any header it may read is newer.
export out cxx
export FLAGS_STR="${flags[*]}"

tokenizer_srcs=$(ls src/tokenizer/*.cpp | grep -v -e '/jinja_' -e '/chat_template')
template_srcs=$(ls src/tokenizer/jinja_*.cpp src/tokenizer/chat_template.cpp)
http_srcs="src/server/http_message.cpp src/server/http_connection.cpp"
openai_srcs="src/server/openai_request.cpp src/server/json_fields.cpp src/server/api_error.cpp src/sched/request.cpp
  $(ls src/server/tool_parser*.cpp) src/server/reasoning_parser.cpp"
need_srcs=""
for h in "${harnesses[@]}"; do
  case "$h" in
    tokenizer_*) need_srcs+=" $tokenizer_srcs" ;;
    chat_template) need_srcs+=" $template_srcs" ;;
    http_request) need_srcs+=" $http_srcs" ;;
    openai_request) need_srcs+=" $openai_srcs" ;;
  esac
done
# shellcheck disable=SC2016
printf '%s\n' $need_srcs | sort -u | xargs -P "$jobs" -I{} bash -c \
  'read -ra flags <<<"$FLAGS_STR"; src={}; obj="$out/obj/$(basename "${src%.cpp}").o";
   newest=$(ls -t src/tokenizer/*.h src/core/*.h src/server/*.h src/sched/*.h src/cache/*.h | head -1);
   if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest" -nt "$obj" ]; then
     echo "  compile $src"; "$cxx" "${flags[@]}" -c "$src" -o "$obj"; fi'

link() {  # harness name, object names...
  local name=$1
  shift
  local objs=()
  for s in "$@"; do objs+=("$out/obj/$(basename "${s%.cpp}").o"); done
  echo "  link fuzz_$name"
  "$cxx" "${flags[@]/fuzzer-no-link/fuzzer}" "tests/fuzz/fuzz_$name.cpp" "${objs[@]}" "${libs[@]}" -o "$out/fuzz_$name"
}
for h in "${harnesses[@]}"; do
  case "$h" in
    tokenizer_*) link "$h" $tokenizer_srcs ;;
    chat_template) link "$h" $template_srcs ;;
    http_request) link "$h" $http_srcs ;;
    openai_request) link "$h" $openai_srcs ;;
  esac
done
[ "$build_only" = 1 ] && exit 0

status=0
run() {  # harness name, label, extra libFuzzer flags...
  local name=$1 label=$2
  shift 2
  local corpus="$out/corpus/$name"
  mkdir -p "$corpus"
  if [ -d "tests/fuzz/corpus/$name" ]; then cp -n tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true; fi
  echo "== fuzz_$name ($label): ${seconds}s"
  if ! "$out/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="$out/artifacts/${label}-" "$@" "$corpus" >"$out/$label.log" 2>&1; then
    echo "   FAILED: see $out/$label.log and $out/artifacts/" >&2
    tail -30 "$out/$label.log" >&2
    status=1
  fi
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$out/$label.log" | tr '\n' ' '
  echo
}
for h in "${harnesses[@]}"; do
  case "$h" in
    tokenizer_encode)
      for f in $families; do
        if [ ! -f "assets/tokenizers/$f/tokenizer.json" ]; then
          echo "fuzz.sh: assets/tokenizers/$f missing (run scripts/setup.sh)" >&2
          status=1
          continue
        fi
        PAGELLM_FUZZ_TOKENIZER=$f run tokenizer_encode "encode-$f" -max_len=2048
      done ;;
    tokenizer_json) run tokenizer_json tokenizer_json -max_len=16384 -dict=tests/fuzz/tokenizer_json.dict ;;
    chat_template)
      mkdir -p "$out/corpus/chat_template"
      python3 -c "import json; [open(f'$out/corpus/chat_template/{f}','w').write(json.load(open(f'assets/tokenizers/{f}/tokenizer_config.json'))['chat_template']) for f in ['qwen3','llama3','gemma3','deepseek_v3']]" 2>/dev/null || true
      run chat_template chat_template -max_len=4096 ;;
    http_request) run http_request http_request -max_len=8192 -dict=tests/fuzz/http_request.dict ;;
    openai_request) run openai_request openai_request -max_len=4096 -dict=tests/fuzz/openai_request.dict ;;
  esac
done
exit $status
