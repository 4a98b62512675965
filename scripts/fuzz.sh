#!/usr/bin/env bash
# Fuzzes the GGUF reader, then briefly the GBNF parser and JSON Schema converter and qrun
# serve's request parsing: builds
# tests/fuzz with clang (libFuzzer + ASan + UBSan) in build-fuzz/, seeds a corpus with small Writer-made files, the shared models, vocab and
# invalid files and past findings (tests/fuzz/regressions/), and runs for N seconds. Exits non-zero when the fuzzer finds a crash,
# a hang or a leak; the input that did it is left in build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [SECONDS=60]
# Environment: QRUN_TEST_DATA (default <repo>/../shared), QRUN_FUZZ_BUILD (default
# <repo>/build-fuzz), QRUN_FUZZ_MAX_LEN (largest input in bytes, default 65536).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
build=${QRUN_FUZZ_BUILD:-$root/build-fuzz}
data=${QRUN_TEST_DATA:-$root/../shared}
max_len=${QRUN_FUZZ_MAX_LEN:-65536}

if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2
  exit 2
fi

CC=clang CXX=clang++ cmake -S "$root/tests/fuzz" -B "$build" > /dev/null
cmake --build "$build" -j2 --target gguf_fuzz gguf_fuzz_seeds grammar_fuzz serve_request_fuzz

seeds=$build/seeds
corpus=$build/corpus
artifacts=$build/artifacts
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/gguf_fuzz_seeds" "$seeds"
shopt -s nullglob
for f in "$data"/models/*.gguf "$data"/models/invalid/*.gguf "$data"/vocab/*.gguf \
    "$root"/tests/fuzz/regressions/*; do
  cp -f "$f" "$seeds/"
done
shopt -u nullglob

# run_fuzzer TARGET SECONDS CORPUS SEEDS MAX_LEN DICT: the first directory collects new
# inputs; the seeds are only read. libFuzzer exits non-zero on a crash, a timeout (-timeout
# seconds for one input) or an out-of-memory, and leaves the input in $artifacts.
run_fuzzer() {
  local target=$1 secs=$2 corpus_dir=$3 seed_dir=$4 len=$5 dict=$6
  mkdir -p "$corpus_dir"
  echo "fuzz.sh: running $target for ${secs}s (corpus $corpus_dir, seeds $seed_dir)"
  if ! "$build/$target" "$corpus_dir" "$seed_dir" -max_total_time="$secs" -max_len="$len" \
      -timeout=10 -rss_limit_mb=2048 -dict="$dict" -artifact_prefix="$artifacts/" \
      -print_final_stats=1; then
    echo "fuzz.sh: the fuzzer found a problem; reproduce with: $build/$target $artifacts/<file>" >&2
    exit 1
  fi
  echo "fuzz.sh: $target: no crash in ${secs}s"
}

run_fuzzer gguf_fuzz "$seconds" "$corpus" "$seeds" "$max_len" "$root/tests/fuzz/gguf.dict"
# The GBNF parser, matcher and JSON Schema converter, and qrun serve's request parsing (the
# OpenAI bodies), for shorter times (their inputs are small): QRUN_FUZZ_GRAMMAR_SECONDS and
# QRUN_FUZZ_SERVE_SECONDS, default 20 each.
run_fuzzer grammar_fuzz "${QRUN_FUZZ_GRAMMAR_SECONDS:-20}" "$build/grammar_corpus" \
  "$root/tests/fuzz/grammar_seeds" 4096 "$root/tests/fuzz/grammar.dict"
run_fuzzer serve_request_fuzz "${QRUN_FUZZ_SERVE_SECONDS:-20}" "$build/serve_corpus" \
  "$root/tests/fuzz/serve_seeds" 4096 "$root/tests/fuzz/serve.dict"
