#!/usr/bin/env bash
# Side-by-side speed of qrun and llama.cpp on the same GGUF files, same threads, in one
# run: for each weight type it synthesizes a full-size model once (qrun synth, into a cache
# directory outside the repository), then runs `qrun bench` and `llama-bench` alternately
# per test (pp, then tg) and prints qrun/llama.cpp ratios and the tg roofline shares.
# It builds only qrun (in QRUN_BUILD_DIR); llama.cpp must already be built (see
# docs/PERFORMANCE.md). Everything is configured by environment variables:
#   LLAMA_CPP_BIN   directory with llama-bench         (/tmp/llama.cpp/build/bin)
#   QRUN_BIN        a qrun binary to use instead of building one
#   QRUN_BUILD_DIR  where to build qrun                (<repo>/build)
#   CACHE_DIR       synthetic models and results       (${XDG_CACHE_HOME:-~/.cache}/qrun-bench)
#   LIKE            shape preset for qrun synth        (tinyllama-1.1b)
#   TYPES           weight types / recipes             ("q4_0 q8_0 q4_k_m")
#   VOCAB           GGUF to copy the tokenizer from    (<repo>/../shared/vocab/ggml-vocab-llama-spm.gguf)
#   THREADS PP TG REPS                                 (2, 128, 128, 3)
# Usage: scripts/bench.sh            (or e.g. PP=32 TG=16 REPS=2 scripts/bench.sh)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LLAMA_CPP_BIN=${LLAMA_CPP_BIN:-/tmp/llama.cpp/build/bin}
QRUN_BUILD_DIR=${QRUN_BUILD_DIR:-$repo/build}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/qrun-bench}
LIKE=${LIKE:-tinyllama-1.1b}
TYPES=${TYPES:-q4_0 q8_0 q4_k_m}
VOCAB=${VOCAB:-$repo/../shared/vocab/ggml-vocab-llama-spm.gguf}
THREADS=${THREADS:-2}
PP=${PP:-128}
TG=${TG:-128}
REPS=${REPS:-3}

die() { echo "bench.sh: $*" >&2; exit 1; }

llama_bench=$LLAMA_CPP_BIN/llama-bench
[[ -x $llama_bench ]] || die "no llama-bench in LLAMA_CPP_BIN=$LLAMA_CPP_BIN (build it: docs/PERFORMANCE.md)"
command -v python3 >/dev/null || die "python3 is needed to read the JSON results"

if [[ -n ${QRUN_BIN:-} ]]; then
  qrun=$QRUN_BIN
else
  echo "bench.sh: building qrun in $QRUN_BUILD_DIR" >&2
  cmake -S "$repo" -B "$QRUN_BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$QRUN_BUILD_DIR" -j "${JOBS:-2}" --target qrun >/dev/null
  qrun=$QRUN_BUILD_DIR/cli/qrun
fi
[[ -x $qrun ]] || die "no qrun binary at $qrun"

vocab_args=()
if [[ -f $VOCAB ]]; then
  vocab_args=(--vocab "$VOCAB")
else
  echo "bench.sh: warning: no $VOCAB; the models get the demo model's 512-token vocabulary" >&2
fi

mkdir -p "$CACHE_DIR"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$CACHE_DIR/results-$stamp
mkdir -p "$out"
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  commit+="-dirty"
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "repository commit: $commit; qrun binary: $qrun ($("$qrun" --version | head -1))"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cpus)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "qrun isa: ${QRUN_FORCE_ISA:-default}; threads $THREADS; pp$PP tg$TG; $REPS runs each"
} >"$out/meta.txt"

for type in $TYPES; do
  model=$CACHE_DIR/$LIKE-$type.gguf
  if [[ ! -f $model ]]; then
    "$qrun" synth --like "$LIKE" --type "$type" "${vocab_args[@]}" -o "$model"
  fi
  # Alternate the two tools test by test, so that a change of machine load hits both.
  for test in pp tg; do
    if [[ $test == pp ]]; then p=$PP n=0; else p=0 n=$TG; fi
    [[ $p == 0 && $n == 0 ]] && continue  # PP=0 or TG=0 skips that test
    echo "bench.sh: $type $test: qrun" >&2
    "$qrun" bench -m "$model" -p "$p" -n "$n" -t "$THREADS" -r "$REPS" --json \
      >"$out/qrun-$type-$test.json" 2>>"$out/qrun.log"
    echo "bench.sh: $type $test: llama.cpp" >&2
    "$llama_bench" -m "$model" -p "$p" -n "$n" -t "$THREADS" -r "$REPS" -o json \
      >"$out/llama-$type-$test.json" 2>>"$out/llama.log"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/meta.txt"

# shellcheck disable=SC2086  # TYPES is a list
python3 - "$out" "$LIKE" $TYPES <<'EOF'
import json, os, sys

out, like, types = sys.argv[1], sys.argv[2], sys.argv[3:]

def load(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        records = json.load(f)
    return records[0] if records else None

def rate(r):
    return f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}" if r else "-"

def ratio(q, l):
    return f"{q['avg_ts'] / l['avg_ts']:.2f}" if q and l and l['avg_ts'] > 0 else "-"

print(open(os.path.join(out, "meta.txt")).read().rstrip())
print()
print("| model | test | qrun t/s | llama.cpp t/s | qrun/llama.cpp | qrun % of mem BW | llama.cpp % of mem BW |")
print("| ----- | ---- | -------: | ------------: | -------------: | ---------------: | --------------------: |")
for t in types:
    for test in ("pp", "tg"):
        q, l = load(f"qrun-{t}-{test}.json"), load(f"llama-{t}-{test}.json")
        if not q and not l:
            continue
        r = q or l
        size = r["n_prompt"] + r["n_gen"]
        share_q = share_l = ""
        if test == "tg" and q and q.get("memory_gbps"):
            bw = q["weight_bytes_per_token"] / 1e9 / q["memory_gbps"]
            share_q = f"{100 * q['avg_ts'] * bw:.1f}"
            share_l = f"{100 * l['avg_ts'] * bw:.1f}" if l else "-"
        print(f"| {like} {t} | {test}{size} | {rate(q)} | {rate(l)} | {ratio(q, l)} | {share_q} | {share_l} |")
mem = [load(f"qrun-{t}-tg.json") for t in types]
mem = [m["memory_gbps"] for m in mem if m and m.get("memory_gbps")]
if mem:
    print()
    print(f"memory read bandwidth (qrun bench, per tg run): {min(mem):.2f} .. {max(mem):.2f} GB/s")
print(f"raw results: {out}")
EOF
