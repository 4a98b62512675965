#!/usr/bin/env bash
# The cost of a JSON-schema grammar on decoding, for qrun and llama.cpp on the same file:
# for each seed, `qrun run` and `llama-completion` generate -n tokens at --temp 0.8 without
# and with -jf SCHEMA, alternately, on -t threads; the generation tokens per second each
# reports (qrun: --json timings; llama.cpp: its "eval time" line) are collected and the
# medians printed with the slowdown the grammar causes.
# Usage: scripts/bench_grammar.sh MODEL.gguf SCHEMA.json [SEEDS=5] [N=64] [THREADS=2]
# Environment: QRUN (default build/cli/qrun), LLAMA_BIN (default /tmp/llama.cpp/build/bin).
set -euo pipefail

model=$1
schema=$2
seeds=${3:-5}
n=${4:-64}
threads=${5:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
qrun=${QRUN:-$root/build/cli/qrun}
llama=${LLAMA_BIN:-/tmp/llama.cpp/build/bin}/llama-completion
prompt="Write the record as JSON:"
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for seed in $(seq 1 "$seeds"); do
  for grammar in "" "-jf $schema"; do
    # shellcheck disable=SC2086
    ts=$("$qrun" run -q --json --no-stdin -m "$model" -t "$threads" -n "$n" --temp 0.8 -s "$seed" \
      -p "$prompt" $grammar | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["timings"]["gen_tok_s"], j["timings"]["gen_tokens"])')
    echo "qrun ${grammar:+grammar} $ts" >> "$out"
    if [ -x "$llama" ]; then
      # shellcheck disable=SC2086
      ts=$("$llama" -m "$model" -t "$threads" -n "$n" --temp 0.8 -s "$seed" -p "$prompt" \
        -no-cnv --no-display-prompt $grammar 2>&1 >/dev/null </dev/null |
        sed -n 's/.* eval time = .*\/ *\([0-9]*\) runs.*, *\([0-9.]*\) tokens per second.*/\2 \1/p' |
        grep -v '^$' | tail -1)
      echo "llama.cpp ${grammar:+grammar} $ts" >> "$out"
    fi
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    parts = line.split()
    key = " ".join(parts[:-2])
    rows.setdefault(key, []).append((float(parts[-2]), int(parts[-1])))
for tool in ("qrun", "llama.cpp"):
    if tool not in rows:
        continue
    plain = statistics.median(t for t, _ in rows[tool])
    gram = statistics.median(t for t, _ in rows[tool + " grammar"])
    toks = statistics.median(n for _, n in rows[tool + " grammar"])
    print(f"{tool:10s} tg without grammar {plain:7.2f} t/s, with {gram:7.2f} t/s "
          f"(median of {len(rows[tool])} runs, {toks:.0f} tokens under the grammar): "
          f"{100 * (1 - gram / plain):5.1f} % slower")
PY
