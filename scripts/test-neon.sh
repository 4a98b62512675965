#!/usr/bin/env bash
# Cross-builds the kernels, core/ and models/, with the kernel tests, quant_models and the
# forward golden tests, for arm64 (QRUN_NO_CLI, Debian's aarch64-linux-gnu toolchain, GoogleTest from
# /usr/src/googletest) into build/neon and runs them under qemu-user on three emulated CPUs,
# one per NEON level (kernel_table.h):
#   max          I8MM and dotprod: selects i8mm; its run walks the generic, neon, dotprod
#                and i8mm tables, so it runs every test of every level (the attention tests
#                a level only where its kernels differ: tests/support/attention_isas.h);
#   neoverse-n1  dotprod without I8MM: selects dotprod;
#   cortex-a53   neither: selects neon.
# The last two compare nothing the first run has not (each level's table is built from the
# level alone, whatever the host); they show that a CPU without an extension selects the
# level below it and never meets that extension's instructions. So they run the kernel tests
# that call every kernel of their levels (kernels_neon, _neon_iq4, _neon_k_low, _table, _dot,
# _repack and _ops) and the forward pass against llama.cpp's golden logits on the shared models (forward_golden,
# every level the CPU has), not the gemm, KV-type, backend and quant ones that walk the same
# tables again. Each run sets QRUN_EXPECT_ISA, which KernelsNeon.HostRunsTheExpectedLevel
# checks against the level the CPU selects.
# Usage: scripts/test-neon.sh   (packages: scripts/install-deps.sh --test)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export QRUN_TEST_DATA="${QRUN_TEST_DATA:-$root/../shared}"
jobs=$(nproc)
build=build/neon

cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DQRUN_WERROR=ON -DQRUN_KERNELS_ONLY=OFF -DQRUN_NO_CLI=ON -DQRUN_CUDA=OFF \
  >/dev/null
cmake --build "$build" -j "$jobs"

# Only the *_dotprod and *_i8mm objects may hold SDOT/UDOT, only the *_i8mm ones the I8MM
# instructions, and their only global symbols may be their own *_dotprod / *_i8mm functions:
# a shared inline or template copy compiled there could be picked by the linker for callers
# on CPUs without the extension (local symbols cannot).
objdir="$build/kernels/cpu/CMakeFiles/qrun_kernels_cpu.dir"
dotprod_insns='sdot|udot'
i8mm_insns='smmla|ummla|usmmla|usdot|sudot'
mapfile -t baseline < <(find "$objdir" -name '*.o' ! -name '*_dotprod.cpp.o' ! -name '*_i8mm.cpp.o')
if aarch64-linux-gnu-objdump -d "${baseline[@]}" | grep -wE "$dotprod_insns|$i8mm_insns" >/dev/null; then
  echo "test-neon: a baseline NEON object uses the dotprod or i8mm instructions" >&2
  exit 1
fi
if aarch64-linux-gnu-objdump -d "$objdir"/neon/*_dotprod.cpp.o | grep -wE "$i8mm_insns" >/dev/null; then
  echo "test-neon: a *_dotprod object uses the i8mm instructions" >&2
  exit 1
fi
for ext in dotprod i8mm; do
  if aarch64-linux-gnu-nm -C -g --defined-only "$objdir"/neon/*_"$ext".cpp.o |
    grep -vE "^\$|\.o:\$|_$ext\(" >/dev/null; then
    echo "test-neon: a *_$ext object defines symbols other than its *_$ext functions:" >&2
    aarch64-linux-gnu-nm -C --defined-only "$objdir"/neon/*_"$ext".cpp.o >&2
    exit 1
  fi
done

unset QRUN_FORCE_ISA  # each run must select its CPU's level
run() {  # run CPU LEVEL [ctest arguments...]
  local cpu=$1 level=$2
  shift 2
  printf '\n---- arm64 tests under qemu-aarch64 -cpu %s (expects the %s kernels) ----\n' "$cpu" "$level"
  QEMU_CPU=$cpu QRUN_EXPECT_ISA=$level ctest --test-dir "$build" -j "$jobs" --output-on-failure "$@"
}
kernel_tests='^(KernelsNeon|KernelTable|KernelsDot|KernelsRepack|KernelsOps)\.'
# The golden cases are listed per level of the CPU the tests were discovered on ("max"):
# each run takes the levels its CPU has (generic: once, under max).
golden='/ForwardGolden\.MatchesLlamaCpp/.*_'
run max i8mm
run neoverse-n1 dotprod -R "$kernel_tests|${golden}(neon|dotprod)"
run cortex-a53 neon -R "$kernel_tests|${golden}neon"
