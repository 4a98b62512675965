#!/usr/bin/env bash
# Runs every test qrun has, as CI does:
#   1. a Release build (warnings as errors; the CUDA target too when nvcc is present) and ctest;
#   2. two `qrun serve` replicas behind nginx on the loopback (scripts/serve-replicas.sh);
#   3. an AddressSanitizer + UndefinedBehaviorSanitizer build and ctest (the test code itself
#      with ASan alone, at -O1: CMakeLists.txt's QRUN_TEST_CODE);
#   4. the kernels, core/ and models/ cross-built for arm64, and their tests and the forward
#      golden tests under qemu-user, on emulated CPUs with I8MM and dotprod, dotprod only,
#      and neither (scripts/test-neon.sh; about ten minutes);
#   5. the fuzzers (GGUF reader, grammar, serve requests) for a bounded time under ASan/UBSan
#      (clang's libFuzzer).
# Shared test data is found through QRUN_TEST_DATA (default: ../shared). The real model the
# golden tests compare with llama.cpp (Gemma 3 270M) is fetched first by
# scripts/fetch-models.sh into $QRUN_MODELS (default ~/.cache/qrun/models; nothing to do when
# it is there), and the tests that need it must then run: QRUN_REQUIRE_REAL_MODELS=1 turns
# their skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export QRUN_TEST_DATA="${QRUN_TEST_DATA:-$root/../shared}"
jobs=$(nproc)
fuzz_seconds="${QRUN_FUZZ_SECONDS:-60}"

bash scripts/install-deps.sh --test
bash scripts/fetch-models.sh >/dev/null
export QRUN_REQUIRE_REAL_MODELS=1
export QRUN_REQUIRE_OPENAI_CLIENT=1

step() { printf '\n==== %s ====\n' "$*"; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

step "release build"
# The CUDA code (when nvcc is present) for sm_80 and sm_90 with its PTX, not every default
# architecture: the kernels' one __CUDA_ARCH__ branch is at 900, so sm_86 and sm_89 compile
# what sm_80 does, and nvcc compiles each file once per architecture.
cmake -S . -B build/ci-release -DCMAKE_BUILD_TYPE=Release -DQRUN_WERROR=ON \
  -DQRUN_CUDA_ARCHITECTURES="80-real;90" >/dev/null
cmake --build build/ci-release -j "$jobs"
step "release tests"
ctest --test-dir build/ci-release -j "$jobs" --output-on-failure | tee "$logs/release.txt"

step "two qrun serve replicas behind nginx (docs/SERVING.md)"
bash scripts/serve-replicas.sh build/ci-release/cli/qrun

step "sanitizer build (address,undefined)"
# Line tables only (-g1): the reports' stacks keep their files and lines, at a fraction of
# full debug information's compile time. (The test code's flags: CMakeLists.txt.)
cmake -S . -B build/ci-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DQRUN_WERROR=ON -DQRUN_CUDA=OFF \
  -DQRUN_SANITIZE=address,undefined >/dev/null
cmake --build build/ci-asan -j "$jobs"
step "sanitizer tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/ci-asan -j "$jobs" --output-on-failure | tee "$logs/asan.txt"

step "arm64 (NEON) kernel and golden tests under qemu-user"
# Bounded: the cross build and the three emulated runs take about ten minutes on 2 cores.
timeout "${QRUN_NEON_TIMEOUT:-1800}" bash scripts/test-neon.sh | tee "$logs/neon.txt"

step "fuzz the GGUF reader for ${fuzz_seconds}s"
bash scripts/fuzz.sh "$fuzz_seconds"

# One closing line over all the ctest runs (set -o pipefail has already stopped on a failure).
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$logs"/*.txt | awk '{s += $1} END {print s + 0}')
printf '\n%d passed, 0 failed\n' "$total"
