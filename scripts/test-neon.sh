#!/usr/bin/env bash
# Cross-builds the kernels and their tests for arm64 (QRUN_KERNELS_ONLY, Debian's
# aarch64-linux-gnu toolchain, GoogleTest from /usr/src/googletest) into build/neon and
# runs them under qemu-user twice: on an emulated CPU with the dotprod extension ("max")
# and on one without ("cortex-a53"), so that both NEON kernel tables are tested.
# Usage: scripts/test-neon.sh   (packages: scripts/install-deps.sh --test)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export QRUN_TEST_DATA="${QRUN_TEST_DATA:-$root/../shared}"
jobs=$(nproc)
build=build/neon

cmake -S . -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DQRUN_WERROR=ON -DQRUN_KERNELS_ONLY=ON -DQRUN_CUDA=OFF >/dev/null
cmake --build "$build" -j "$jobs"

# Only the *_dotprod objects may hold SDOT/UDOT, and their only global symbols may be their
# *_dotprod functions: a shared inline or template copy compiled there could be picked by
# the linker for callers on CPUs without dotprod (local symbols cannot).
objdir="$build/kernels/cpu/CMakeFiles/qrun_kernels_cpu.dir"
mapfile -t baseline < <(find "$objdir" -name '*.o' ! -name '*_dotprod.cpp.o')
if aarch64-linux-gnu-objdump -d "${baseline[@]}" | grep -wE 'sdot|udot' >/dev/null; then
  echo "test-neon: a baseline NEON object uses the dotprod instructions" >&2
  exit 1
fi
if aarch64-linux-gnu-nm -C -g --defined-only "$objdir"/neon/*_dotprod.cpp.o |
  grep -vE '^$|\.o:$|_dotprod\(' >/dev/null; then
  echo "test-neon: a *_dotprod object defines symbols other than its *_dotprod functions:" >&2
  aarch64-linux-gnu-nm -C --defined-only "$objdir"/neon/*_dotprod.cpp.o >&2
  exit 1
fi
for cpu in max cortex-a53; do
  printf '\n---- arm64 kernel tests under qemu-aarch64 -cpu %s ----\n' "$cpu"
  QEMU_CPU=$cpu ctest --test-dir "$build" -j "$jobs" --output-on-failure
done
