#!/usr/bin/env bash
# Instructions per token on arm64 without arm64 hardware: runs `qrun bench` and llama.cpp's
# llama-bench, both cross-built for arm64, under qemu-user with the instruction-counting
# plugin (tools/qemu-insn-count), on three emulated CPUs, and prints retired guest
# instructions per prompt token and per generated token, side by side, with their ratio.
# A benchmark, not a test, and a proxy: instructions are not time (decode is bound by
# memory bandwidth on real cores). See docs/PERFORMANCE_ARM64.md.
#
#   emulated CPU    level     llama.cpp -march             qrun
#   max             i8mm      armv8.2-a+dotprod+i8mm       detected, or $QRUN_ISA_I8MM
#   neoverse-n1     dotprod   armv8.2-a+dotprod            detected, or $QRUN_ISA_DOTPROD
#   cortex-a53      neon      armv8-a                      detected, or $QRUN_ISA_NEON
# (a QRUN_ISA_* value is passed to qrun as QRUN_FORCE_ISA, unchanged).
#
# Phases by differences, so that loading, warm-up and start-up cancel: both tools run each
# test once to warm up (a pp test in full, a tg test for one token) and then -r 1 times, so
#   A = -p P1 -n N1,  B = -p P2 -n N1,  C = -p P1 -n N2   (-t 1 -r 1)
#   per prompt token    = (B - A) / (2 * (P2 - P1))
#   per generated token = (C - A) / (N2 - N1)
# The counts of one run are deterministic up to the guest's own nondeterminism (-t 1, one
# running thread); every configuration runs REPEAT times and the spread is printed.
#
# Usage: scripts/arm64-insn-count.sh QEMU_SOURCE_TREE [LLAMA_CPP_SOURCE]
# Environment (defaults in brackets):
#   LLAMA_BUILD   where llama.cpp is cross-built, outside this repository [/tmp/llama-arm64]
#   MODELS        GGUF files [/tmp/bench-tinyllama-1.1b-q4_0.gguf /tmp/tl-q4_k_m.gguf]
#   CPUS          emulated CPUs [max neoverse-n1 cortex-a53]
#   P1 P2 N1 N2   [4 12 1 3]          REPEAT [2]
#   JOBS          parallel builds and qemu runs [2]
#   ARM64_DEPS    arm64 libraries qrun links (readline, cpp-httplib, ...), fetched once
#                 from Debian with apt-get download into this folder [build/arm64-deps]
#   ARM64_SYSROOT a ready folder of those libraries instead (nothing is fetched)
#   OUT           logs and counts [build/arm64-insn-count]; a count is reused while it is
#                 newer than the binary and the model that made it
# Needs: g++-aarch64-linux-gnu, qemu-user (7.2 or later), cmake, ccache, apt (for the deps).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if [[ $# -lt 1 ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
fi
qemu_src=$1
llama_src=${2:-/tmp/llama.cpp}
llama_build=${LLAMA_BUILD:-/tmp/llama-arm64}
models=${MODELS:-/tmp/bench-tinyllama-1.1b-q4_0.gguf /tmp/tl-q4_k_m.gguf}
cpus=${CPUS:-max neoverse-n1 cortex-a53}
p1=${P1:-4} p2=${P2:-12} n1=${N1:-1} n2=${N2:-3} repeat=${REPEAT:-2}
deps=$(realpath -m "${ARM64_DEPS:-build/arm64-deps}")
out=$(realpath -m "${OUT:-build/arm64-insn-count}")
jobs=${JOBS:-2}
mkdir -p "$out"

level_of() {
  case $1 in
    max) echo i8mm ;;
    neoverse-n1) echo dotprod ;;
    cortex-a53) echo neon ;;
    *) echo "unknown emulated CPU $1 (max, neoverse-n1, cortex-a53)" >&2; exit 2 ;;
  esac
}
march_of() {
  case $1 in
    i8mm) echo armv8.2-a+dotprod+i8mm ;;
    dotprod) echo armv8.2-a+dotprod ;;
    neon) echo armv8-a ;;
  esac
}

# ---- the plugin ------------------------------------------------------------------------
plugin=$root/build/qemu-insn-count/libinsn_count.so
if [[ ! $plugin -nt tools/qemu-insn-count/insn_count.c ]]; then
  tools/qemu-insn-count/build.sh "$qemu_src" "$plugin" >/dev/null
fi

# ---- arm64 libraries for the full qrun binary (a private sysroot) ------------------------
if [[ -z ${ARM64_SYSROOT:-} && ! -f $deps/.done ]]; then
  echo "arm64-insn-count: fetching arm64 libraries into $deps" >&2
  rm -rf "$deps" && mkdir -p "$deps/apt/lists/partial" "$deps/apt/cache/archives/partial" \
    "$deps/debs" "$deps/root"
  touch "$deps/apt/status"
  apt_opts=(-o APT::Architecture=arm64 -o APT::Architectures::=arm64
    -o Dir::State::Lists="$deps/apt/lists" -o Dir::State::status="$deps/apt/status"
    -o Dir::Cache="$deps/apt/cache" -o Debug::NoLocking=1)
  apt-get update "${apt_opts[@]}" >/dev/null
  (cd "$deps/debs" && apt-get download "${apt_opts[@]}" libreadline-dev libreadline8 \
    libncurses-dev libtinfo6 libncursesw6 libcpp-httplib-dev libcpp-httplib0.11 libssl-dev \
    libssl3 zlib1g-dev zlib1g libbrotli-dev libbrotli1 nlohmann-json3-dev libcli11-dev \
    >/dev/null 2>&1)
  for d in "$deps"/debs/*.deb; do dpkg -x "$d" "$deps/root"; done
  # Absolute symlinks (libfoo.so -> /lib/...) would point into the host: make them relative.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ $target == /* ]]; then
      ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$deps/root$target")" "$link"
    fi
  done < <(find "$deps/root" -type l)
  # The multiarch headers (openssl/opensslconf.h) beside the others, where a cross build
  # that adds only usr/include finds them.
  cp -rn "$deps/root/usr/include/aarch64-linux-gnu/." "$deps/root/usr/include/"
  touch "$deps/.done"
fi
sysroot=${ARM64_SYSROOT:-$deps/root}
libdirs=$sysroot/usr/lib/aarch64-linux-gnu:$sysroot/lib/aarch64-linux-gnu

# ---- qrun for arm64 (GCC, as scripts/test-neon.sh; the whole CLI) ------------------------
qbuild=$root/build/arm64
mkdir -p "$qbuild"
cat >"$qbuild/toolchain.cmake" <<TOOLCHAIN
include($root/cmake/aarch64-linux-gnu.cmake)
list(APPEND CMAKE_FIND_ROOT_PATH $sysroot)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,${libdirs//:/ -Wl,-rpath-link,}")
TOOLCHAIN
PKG_CONFIG_LIBDIR=$sysroot/usr/lib/aarch64-linux-gnu/pkgconfig:$sysroot/usr/share/pkgconfig \
  PKG_CONFIG_SYSROOT_DIR=$sysroot \
  cmake -S . -B "$qbuild" -DCMAKE_TOOLCHAIN_FILE="$qbuild/toolchain.cmake" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DQRUN_CUDA=OFF \
  -DQRUN_BUILD_TESTS=OFF >/dev/null
cmake --build "$qbuild" -j "$jobs" --target qrun >/dev/null
qrun=$qbuild/cli/qrun

# ---- llama.cpp for arm64, one llama-bench per level (outside this repository) ------------
for cpu in $cpus; do
  level=$(level_of "$cpu")
  bin=$llama_build/llama-bench-$level
  [[ -x $bin ]] && continue
  echo "arm64-insn-count: building llama-bench for $level in $llama_build" >&2
  # One build tree: a new GGML_CPU_ARM_ARCH recompiles only ggml-cpu.
  cmake -S "$llama_src" -B "$llama_build/build" \
    -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$(march_of "$level")" \
    -DGGML_OPENMP=OFF -DGGML_BACKEND_DL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TOOLS=ON >/dev/null
  cmake --build "$llama_build/build" -j "$jobs" --target llama-bench >/dev/null
  cp "$llama_build/build/bin/llama-bench" "$bin"
done

# ---- the runs --------------------------------------------------------------------------
# count TOOL CPU MODEL P N REP: runs one bench under the plugin, prints its instruction count.
count() {
  local tool=$1 cpu=$2 model=$3 p=$4 n=$5 rep=$6
  local level tag cmd isa_var
  level=$(level_of "$cpu")
  tag="$tool-$level-$(basename "$model" .gguf)-p$p-n$n-r$rep"
  isa_var="QRUN_ISA_${level^^}"
  # --no-memory-probe: qrun's bandwidth probe runs a number of passes that depends on the
  # host's load, which would not cancel between runs.
  if [[ $tool == qrun ]]; then
    cmd=("$qrun" bench --no-memory-probe)
  else
    cmd=("$llama_build/llama-bench-$level")
  fi
  # A kept count is reused only if it is newer than the binary and the model that made it.
  if [[ ! -s $out/$tag.count || ${cmd[0]} -nt $out/$tag.count || $model -nt $out/$tag.count ]]; then
    env ${!isa_var:+QRUN_FORCE_ISA=${!isa_var}} \
      qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "$cpu" -E LD_LIBRARY_PATH="$libdirs" \
      -plugin "$plugin,out=$out/$tag.count.tmp" \
      "${cmd[@]}" -m "$model" -p "$p" -n "$n" -r 1 -t 1 >"$out/$tag.log" 2>&1 ||
      { echo "arm64-insn-count: $tag failed, see $out/$tag.log" >&2; exit 1; }
    mv "$out/$tag.count.tmp" "$out/$tag.count"
  fi
  awk '{print $2}' "$out/$tag.count"
}

# Every run first, JOBS at a time (each is one single-threaded qemu process).
for cpu in $cpus; do
  for model in $models; do
    for tool in qrun llama; do
      for ((rep = 1; rep <= repeat; rep++)); do
        for pn in "$p1 $n1" "$p2 $n1" "$p1 $n2"; do
          while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
          # shellcheck disable=SC2086
          count $tool "$cpu" "$model" $pn $rep >/dev/null &
        done
      done
    done
  done
done
wait

printf '| level (qemu -cpu) | model | phase | qrun insns/token | llama.cpp insns/token | qrun / llama.cpp | spread over %d runs (qrun, llama.cpp) |\n' "$repeat"
echo '|---|---|---|---:|---:|---:|---|'
for cpu in $cpus; do
  level=$(level_of "$cpu")
  for model in $models; do
    declare -A per=()
    for tool in qrun llama; do
      pp=() tg=()
      for ((rep = 1; rep <= repeat; rep++)); do
        a=$(count $tool "$cpu" "$model" "$p1" "$n1" $rep)
        b=$(count $tool "$cpu" "$model" "$p2" "$n1" $rep)
        c=$(count $tool "$cpu" "$model" "$p1" "$n2" $rep)
        pp+=($(((b - a) / (2 * (p2 - p1)))))
        tg+=($(((c - a) / (n2 - n1))))
      done
      per[$tool.pp]="${pp[*]}"
      per[$tool.tg]="${tg[*]}"
    done
    for phase in pp tg; do
      python3 - "$level ($cpu)" "$(basename "$model")" "$phase" "${per[qrun.$phase]}" \
        "${per[llama.$phase]}" <<'PY'
import sys
level, model, phase, q, l = sys.argv[1:]
q = [int(x) for x in q.split()]
l = [int(x) for x in l.split()]
def spread(v):
    return f"{(max(v) - min(v)) / max(1, min(v)) * 100:.3f}%"
qm, lm = sum(q) / len(q), sum(l) / len(l)
name = "prompt" if phase == "pp" else "generated"
print(f"| {level} | {model} | {name} | {qm / 1e6:.1f} M | {lm / 1e6:.1f} M | "
      f"{qm / lm:.2f} | {spread(q)}, {spread(l)} |")
PY
    done
    unset per
  done
done
