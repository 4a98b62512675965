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

echo "fuzz.sh: running gguf_fuzz for ${seconds}s (corpus $corpus, seeds $seeds)"
# The first directory collects new inputs; the seeds are only read. libFuzzer exits
# non-zero on a crash, a timeout (-timeout seconds for one input) or an out-of-memory.
if ! "$build/gguf_fuzz" "$corpus" "$seeds" \
    -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix="$artifacts/" -print_final_stats=1; then
  echo "fuzz.sh: the fuzzer found a problem; reproduce with: $build/gguf_fuzz $artifacts/<file>" >&2
  exit 1
fi
echo "fuzz.sh: no crash in ${seconds}s"

# The GBNF parser, matcher and JSON Schema converter, for a shorter time (their inputs are
# small): QRUN_FUZZ_GRAMMAR_SECONDS, default 20.
grammar_seconds=${QRUN_FUZZ_GRAMMAR_SECONDS:-20}
mkdir -p "$build/grammar_corpus"
echo "fuzz.sh: running grammar_fuzz for ${grammar_seconds}s"
if ! "$build/grammar_fuzz" "$build/grammar_corpus" "$root/tests/fuzz/grammar_seeds" \
    -max_total_time="$grammar_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/grammar.dict" \
    -artifact_prefix="$artifacts/" -print_final_stats=1; then
  echo "fuzz.sh: the fuzzer found a problem; reproduce with: $build/grammar_fuzz $artifacts/<file>" >&2
  exit 1
fi
echo "fuzz.sh: grammar_fuzz: no crash in ${grammar_seconds}s"

# qrun serve's request parsing (the OpenAI bodies), for a shorter time too:
# QRUN_FUZZ_SERVE_SECONDS, default 20.
serve_seconds=${QRUN_FUZZ_SERVE_SECONDS:-20}
mkdir -p "$build/serve_corpus"
echo "fuzz.sh: running serve_request_fuzz for ${serve_seconds}s"
if ! "$build/serve_request_fuzz" "$build/serve_corpus" "$root/tests/fuzz/serve_seeds" \
    -max_total_time="$serve_seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -dict="$root/tests/fuzz/serve.dict" \
    -artifact_prefix="$artifacts/" -print_final_stats=1; then
  echo "fuzz.sh: the fuzzer found a problem; reproduce with: $build/serve_request_fuzz $artifacts/<file>" >&2
  exit 1
fi
echo "fuzz.sh: serve_request_fuzz: no crash in ${serve_seconds}s"
