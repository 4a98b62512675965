#!/usr/bin/env bash
# Time to first token with --prompt-cache against a cold run, 2 threads, on a ~2000-token
# prompt: a synthetic TinyLlama-1.1B Q4_K_M (random weights, the shared TinyLLama-v0 vocab)
# unless a model is given. Writes the cache once, then alternates cold, warm (the same
# prompt) and warm-extended (the prompt plus a question, with --prompt-cache-ro) REPS
# times, since other work on the machine makes single figures noisy; prints each run's
# time to first token (reading the cache file included) and the median ratios, and checks
# that every warm output equals the cold one.
# Usage: scripts/bench-prompt-cache.sh [MODEL.gguf|-] [QRUN] [REPS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:--}
qrun=${2:-$here/build/cli/qrun}
reps=${3:-2}
data=${QRUN_TEST_DATA:-$here/../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$model" = "-" ]; then
  model=$tmp/tinyllama-1.1b-q4_k_m.gguf
  "$qrun" synth -o "$model" --like tinyllama-1.1b --type q4_k_m \
    --vocab "$data/models/TinyLLama-v0-5M-Q4_K_M.gguf" >/dev/null 2>&1
fi
# 215 sentences of 8 words from a small word list: 1995 tokens with the TinyLLama vocab.
python3 - "$tmp/prompt.txt" <<'PY'
import random, sys
random.seed(1)
words = ("the a little girl named Lily went to park with her friend Tom they saw big red ball "
         "dog cat tree sun sky happy sad ran jumped laughed played found box toy bird flew over "
         "under near house garden flower water cake").split()
text = " ".join(" ".join(random.choice(words) for _ in range(8)).capitalize() + "."
                for _ in range(215))
open(sys.argv[1], "w").write(text)
PY
{ cat "$tmp/prompt.txt"; printf ' What did Lily find in the box?'; } >"$tmp/question.txt"
cache=$tmp/prompt.kv
common=(run -m "$model" -n 8 --temp 0 -t 2 -c 4096 --no-stdin -q --json)
"$qrun" "${common[@]}" -f "$tmp/prompt.txt" --prompt-cache "$cache" >/dev/null
echo "cache file: $(stat -c %s "$cache") bytes"
ttft() { python3 -c 'import json,sys; print(json.load(sys.stdin)["timings"]["ttft_ms"])'; }
tokens() { python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
cold=() warm=() ext=()
for r in $(seq 1 "$reps"); do
  c=$("$qrun" "${common[@]}" -f "$tmp/prompt.txt")
  w=$("$qrun" "${common[@]}" -f "$tmp/prompt.txt" --prompt-cache "$cache" --prompt-cache-ro)
  cq=$("$qrun" "${common[@]}" -f "$tmp/question.txt")
  e=$("$qrun" "${common[@]}" -f "$tmp/question.txt" --prompt-cache "$cache" --prompt-cache-ro)
  [ "$(tokens <<<"$c")" = "$(tokens <<<"$w")" ] || { echo "warm output differs"; exit 1; }
  [ "$(tokens <<<"$cq")" = "$(tokens <<<"$e")" ] || { echo "extended output differs"; exit 1; }
  cold+=("$(ttft <<<"$c")") warm+=("$(ttft <<<"$w")") ext+=("$(ttft <<<"$e")")
  printf 'rep %d: ttft cold %8.1f ms (question %8.1f) | warm %7.1f ms | warm + question %7.1f ms\n' \
    "$r" "$(ttft <<<"$c")" "$(ttft <<<"$cq")" "$(ttft <<<"$w")" "$(ttft <<<"$e")"
done
python3 - "${cold[*]}" "${warm[*]}" "${ext[*]}" <<'PY'
import statistics, sys
cold, warm, ext = ([float(x) for x in a.split()] for a in sys.argv[1:])
c = statistics.median(cold)
print("median ttft: cold %.1f ms, warm %.1f ms (%.1fx lower), warm + question %.1f ms (%.1fx lower)"
      % (c, statistics.median(warm), c / statistics.median(warm), statistics.median(ext),
         c / statistics.median(ext)))
PY
