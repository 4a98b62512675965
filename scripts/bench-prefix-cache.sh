#!/usr/bin/env bash
# Time to first token of `qrun serve` for a request that shares a long system prompt (about
# 1000 tokens) with an earlier one: with prefix caching (the default) and, as the baseline
# in the same run, with --no-enable-prefix-caching (the same request cold). Each request is
# a completion of one token, timed from sending to the whole answer, so the time is the
# prompt's prefill plus one decode step; the server's `usage` says how many prompt tokens
# came from the cache. Prints the medians of REPS distinct questions and their ratio (other
# work on the machine makes absolute figures noisy; compare the ratio).
# Not a test: REPS requests after one that fills the cache, loopback only.
# Usage: scripts/bench-prefix-cache.sh [MODEL.gguf] [QRUN] [REPS]
# QRUN_SERVE_ARGS adds flags to both servers.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/serve-lib.sh
. "$here/scripts/serve-lib.sh"
model=${1:-${QRUN_MODELS:-$HOME/.cache/qrun/models}/gemma-3-270m-q4_k_m.gguf}
qrun=${2:-$here/build/cli/qrun}
reps=${3:-5}
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
[ -f "$model" ] || { echo "bench-prefix-cache.sh: no model $model (scripts/fetch-models.sh)" >&2; exit 1; }

# Starts `qrun serve` with the given flags on a free port; sets pid and port.
start() {
  # shellcheck disable=SC2086 # QRUN_SERVE_ARGS is a list of flags
  "$qrun" serve -m "$model" -t 2 -c 4096 -np 1 --port 0 -q "$@" ${QRUN_SERVE_ARGS:-} \
    2>"$tmp/serve.log" &
  pid=$!
  port=$(serve_port "$tmp/serve.log" "$pid")
}
stop() {
  kill "$pid"
  wait "$pid" || true
  pid=
}

# One request that fills the cache, then REPS with the same system prompt and another
# question each; prints "median seconds, median cached prompt tokens, prompt tokens".
measure() {
  python3 - "$port" "$reps" <<'PY'
import json, statistics, sys, time, urllib.request
port, reps = int(sys.argv[1]), int(sys.argv[2])
facts = ["The archive keeps letters from the harbour office, sorted by year and by ship.",
         "Each ship has a ledger of its cargo, its crew and the ports it called at.",
         "The clerks wrote in ink on ruled paper, and some pages are water-stained.",
         "Requests for copies go to the reading room, which opens at nine on weekdays."]
system = "You answer questions about the archive. " + " ".join(
    f"Note {i}: {facts[i % len(facts)]}" for i in range(60))
def ask(question):
    body = json.dumps({"prompt": system + "\nQuestion: " + question + "\nAnswer:",
                       "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=600) as r:
        usage = json.load(r)["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return time.monotonic() - t0, cached, usage["prompt_tokens"]
ask("Where do the letters come from?")  # fills the cache (and pages the weights in)
runs = [ask(f"What does ledger {i} hold?") for i in range(reps)]
print(f"{statistics.median(r[0] for r in runs):.4f} "
      f"{statistics.median(r[1] for r in runs):.0f} {runs[0][2]}")
PY
}

start
read -r warm cached prompt < <(measure)
stop
start --no-enable-prefix-caching
read -r cold cold_cached _ < <(measure)
stop
echo "prompt of $prompt tokens; the shared system prompt is all but its last few"
echo "cold (--no-enable-prefix-caching): ${cold} s to the first token (cached: $cold_cached)"
echo "prefix cache:                      ${warm} s to the first token (cached: $cached)"
python3 -c "print(f'ratio cold / cached: {$cold / $warm:.1f}x')"
