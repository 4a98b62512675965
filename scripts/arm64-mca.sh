#!/usr/bin/env bash
# llvm-mca estimates of the NEON gemv (decode: the row-by-row gemv of the GGML layout and the
# repacked 16-row gemv, "gemv-x16") and gemm (prefill) inner loops: compiles the
# kernel files (kernels/cpu/neon) to AArch64 assembly with clang, finds each kernel's hottest
# innermost loop (scripts/arm64_mca_loops.py: the one with the most int8 multiplies; where
# the compiler left the loop body in a helper called once per iteration, that helper's body),
# and prints a Markdown table of llvm-mca's cycles per iteration on two CPU models, with the
# int8 products (MACs) and the quantized weight bytes one iteration covers.
# A proxy, not a measurement: llvm-mca assumes every load hits L1 and knows only the
# scheduling model it was built with (see docs/PERFORMANCE_ARM64.md for what LLVM 14 uses).
# Usage: scripts/arm64-mca.sh [OUT_DIR]   (env: CLANG=clang++, MCA=llvm-mca,
#        MCPUS="neoverse-n1 apple-m1", ITERATIONS=200)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/arm64-mca}
clang=${CLANG:-clang++}
mca=${MCA:-llvm-mca}
mcpus=${MCPUS:-neoverse-n1 apple-m1}
iterations=${ITERATIONS:-200}
mkdir -p "$out"

# level name, -march
levels=("neon armv8-a" "dotprod armv8.2-a+dotprod" "i8mm armv8.2-a+dotprod+i8mm")
# The file of kernels/cpu/neon that holds a kind of kernel at a level; none: the level has
# no such kernel of its own (an i8mm CPU decodes with the dotprod gemv).
source_of() {
  case $1-$2 in
    gemv-neon) echo dot_quants ;;
    gemv-dotprod) echo dot_dotprod ;;
    gemv-x16-neon) echo gemv_repacked ;;
    gemv-x16-dotprod) echo gemv_repacked_dotprod ;;
    gemm-neon) echo gemm_quants ;;
    gemm-dotprod) echo gemm_dotprod ;;
    gemm-i8mm) echo gemm_i8mm ;;
  esac
}
for lv in "${levels[@]}"; do
  read -r level march <<<"$lv"
  for kind in gemv gemv-x16 gemm; do
    src=$(source_of "$kind" "$level")
    [[ -n $src ]] || continue
    "$clang" --target=aarch64-linux-gnu -O2 -std=c++20 -march="$march" -I. -S \
      -o "$out/$kind-$level.s" "kernels/cpu/neon/$src.cpp"
  done
done

# kernel, type, quantized bytes per weight (block bytes / block elements), function regex
# (the kernel's own function, or the helper that holds its loop body).
kernels=(
  "gemv Q4_0 18/32 legacy_group<qrun::BlockQ4_0, .*, 4, true>|gemv_q4_0_q8_0(_dotprod)?\\("
  "gemv Q5_0 22/32 legacy_group<qrun::BlockQ5_0, .*, 4, true>|gemv_q5_0_q8_0(_dotprod)?\\("
  "gemv Q8_0 34/32 legacy_group<qrun::BlockQ8_0, .*, 4, true>|gemv_q8_0_q8_0(_dotprod)?\\("
  "gemv Q4_K 144/256 ^qrun::kernels::neon::vec_dot_q4_k_q8_k(_dotprod)?\\("
  "gemv Q5_K 176/256 ^qrun::kernels::neon::vec_dot_q5_k_q8_k(_dotprod)?\\("
  "gemv Q6_K 210/256 ^qrun::kernels::neon::vec_dot_q6_k_q8_k(_dotprod)?\\("
  "gemv-x16 Q4_0 18/32 gemv_q4_0_x16(_dotprod)?\\(|legacy_block<.*Legacy\\)0>"
  "gemv-x16 IQ4_NL 18/32 gemv_iq4_nl_x16(_dotprod)?\\(|legacy_block<.*Legacy\\)1>"
  "gemv-x16 Q5_0 22/32 gemv_q5_0_x16(_dotprod)?\\(|legacy_block<.*Legacy\\)2>"
  "gemv-x16 Q8_0 34/32 gemv_q8_0_x16(_dotprod)?\\(|legacy_block<.*Legacy\\)3>"
  "gemv-x16 Q4_K 144/256 gemv_q4_k_x16(_dotprod)?\\("
  "gemv-x16 Q5_K 176/256 gemv_q5_k_x16(_dotprod)?\\("
  "gemv-x16 Q6_K 210/256 gemv_q6_k_x16(_dotprod)?\\("
  "gemm Q4_0 18/32 Legacy<qrun::BlockQ4_0,.*>::gemm\\("
  "gemm Q5_0 22/32 Legacy<qrun::BlockQ5_0,.*>::gemm\\("
  "gemm Q8_0 34/32 Legacy<qrun::BlockQ8_0,.*>::gemm\\("
  "gemm Q4_K 144/256 ScaleMin<qrun::BlockQ4_K> >::gemm\\("
  "gemm Q5_K 176/256 ScaleMin<qrun::BlockQ5_K> >::gemm\\("
  "gemm Q6_K 210/256 ::Q6_K>::gemm\\("
)

header="| kernel | type | level | loop | insns | MACs/iter | weight B/iter"
rule="|---|---|---|---|---:|---:|---:"
for cpu in $mcpus; do
  header+=" | $cpu cycles/iter | $cpu MACs/cycle | $cpu weight B/cycle"
  rule+="|---:|---:|---:"
done
echo "$header |"
echo "$rule|"
for k in "${kernels[@]}"; do
  read -r kind type bpw regex <<<"$k"
  for lv in "${levels[@]}"; do
    read -r level march <<<"$lv"
    [[ -n $(source_of "$kind" "$level") ]] || continue
    loop="$out/$kind-$type-$level.loop.s"
    asm="$out/$kind-$level.s"
    # A type may have no kernel of this kind at a level (Q5_K's x16 gemv needs SDOT).
    if ! found=$(python3 scripts/arm64_mca_loops.py "$asm" "$regex" 2>&1 >"$loop"); then
      [[ $found == *"no function matches"* ]] || { echo "$found" >&2; exit 1; }
      echo "| $kind | $type | $level | none |$(printf ' |%.0s' $(seq 3 $((3 * $(wc -w <<<"$mcpus") + 5))))"
      continue
    fi
    read -r work n_insns where <<<"$found"
    # gemv streams each quantized weight once; the gemm tile reads its weights unpacked
    # (int8, from L1) and reuses each for 8 tokens, so its quantized bytes per iteration
    # are those of MACs / 8 weights.
    if [[ $kind == gemm ]]; then weights=$((work / 8)); else weights=$work; fi
    bytes=$(python3 -c "print(f'{$weights * $bpw:.1f}')")
    row="| $kind | $type | $level | $where | $n_insns | $work | $bytes"
    for cpu in $mcpus; do
      cycles=$("$mca" -mtriple=aarch64-linux-gnu -mcpu="$cpu" -mattr=+dotprod,+i8mm \
        -iterations="$iterations" "$loop" 2>/dev/null | awk '/^Total Cycles:/ {print $3}')
      row+=$(python3 -c "c = $cycles / $iterations; \
print(f' | {c:.2f} | {$work / c:.1f} | {$bytes / c:.2f}')")
    done
    echo "$row |"
  done
done
