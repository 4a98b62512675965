#!/usr/bin/env bash
# Speculative decoding against plain decoding, greedy, 2 threads, on one model: prompt
# lookup (--lookup-ngram) on a text-editing prompt whose answer repeats a passage with small
# changes, and, when a draft model is given, the draft model on the same prompt. Runs
# alternate (plain, lookup, draft) REPS times, since other work on the machine makes
# single figures noisy; prints each run's generation tok/s and acceptance, the median
# ratios, and checks every output equals the plain one.
# Usage: scripts/bench-speculative.sh [MODEL.gguf] [DRAFT.gguf|-] [QRUN] [REPS] [N]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-${QRUN_MODELS:-$HOME/.cache/qrun/models}/gemma-3-270m-q4_k_m.gguf}
draft=${2:--}
qrun=${3:-$here/build/cli/qrun}
reps=${4:-3}
n=${5:-192}
ngram=${NGRAM:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/prompt.txt" <<'TXT'
Original paragraph:
The old lighthouse stood at the end of the rocky point, where the river met the sea. For a
hundred years its keepers had climbed the spiral stairs every evening to light the lamp,
and every morning they wrote the weather, the ships and the height of the tide in a thick
leather book. When the last keeper retired, the town turned the lighthouse into a small
museum, and the leather books now rest in a glass case beside the door, open at the page
that describes the great storm of 1921.

The same paragraph with "lighthouse" replaced by "tower" and "keepers" replaced by "guards":
The old tower stood at the end of the rocky point, where the river met the sea. For a
TXT
common=(run -m "$model" -f "$tmp/prompt.txt" -n "$n" --temp 0 -t 2 --no-stdin --json)
kinds=(plain lookup)
[ "$draft" != "-" ] && kinds+=(draft)
for r in $(seq 1 "$reps"); do
  for k in "${kinds[@]}"; do
    case $k in
      plain) extra=() ;;
      lookup) extra=(--lookup-ngram "$ngram") ;;
      draft) extra=(-md "$draft") ;;
    esac
    "$qrun" "${common[@]}" "${extra[@]}" 2>/dev/null >"$tmp/$k.$r.json"
  done
done
python3 - "$tmp" "$reps" "${kinds[@]}" <<'PY'
import json, statistics, sys
d, reps, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs = {k: [json.load(open(f"{d}/{k}.{r}.json")) for r in range(1, reps + 1)] for k in kinds}
ref = runs["plain"][0]["tokens"]
for k in kinds:
    for i, j in enumerate(runs[k]):
        t = j["timings"]
        same = "same output" if j["tokens"] == ref else "OUTPUT DIFFERS"
        extra = ""
        if "drafted" in t:
            extra = " drafted %d accepted %d (%.0f %%) %.2f tok/pass" % (
                t["drafted"], t["accepted"], 100 * t["acceptance_rate"], t["tokens_per_pass"])
        print(f"{k:6} run {i + 1}: {t['gen_tokens']} tokens, {t['gen_tok_s']:.1f} tok/s{extra}, {same}")
med = {k: statistics.median(j["timings"]["gen_tok_s"] for j in runs[k]) for k in kinds}
for k in kinds:
    if k != "plain":
        ratios = [a["timings"]["gen_tok_s"] / b["timings"]["gen_tok_s"] for a, b in zip(runs[k], runs["plain"])]
        print(f"{k}: median {med[k]:.1f} tok/s vs plain {med['plain']:.1f}: x{med[k] / med['plain']:.2f}"
              f" (per pair: {', '.join('%.2f' % x for x in ratios)})")
PY
