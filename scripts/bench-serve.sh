#!/usr/bin/env bash
# Aggregate generated tokens/s of `qrun serve` with 1, 2, 4, 8 and 16 concurrent clients,
# each asking for N tokens (greedy, --ignore-eos, streamed) after a short distinct prompt,
# over the wall time and, without the prompts, as decode tokens/s (see load()): the batched
# engine with -np NP (default 8), and as the baseline in the same run -np 1 (one sequence at
# a time: the others wait in the queue); then, side by side, llama-server -np NP on the same
# file and load when LLAMA_SERVER names it (default /tmp/llama.cpp/build/bin/llama-server,
# skipped when absent, and on the synthetic model, whose random bytes it refuses). A synthetic TinyLlama-1.1B Q4_0 (random weights, the shared
# TinyLLama-v0 vocab) unless a model is given; 2 threads. Prints each configuration's tok/s
# and the ratios (other work on the machine makes absolute figures noisy; compare ratios).
# Not a test: the load generator is bounded (clients x N tokens, REPS rounds), loopback only.
# What the gain rests on: a batched decode step is one matmul of -np rows per weight, whose
# cost the CPU kernels decide (kernels/cpu/ops_matmul.cpp: gemm tiles from
# GemmKernels::min_tokens rows on, else the repacked gemv, which reads each weight once for
# every row). `qrun bench -p 1,2,4,8 -n 0` shows the per-row cost of those sizes.
# Usage: scripts/bench-serve.sh [MODEL.gguf|-] [QRUN] [N] [REPS]
# QRUN_SERVE_ARGS adds flags to both qrun servers (e.g. "-ngl all" for the CUDA backend);
# CLIENTS (default "1 2 4 8 16") and NP (default 8) set the load and the slots.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/serve-lib.sh
. "$here/scripts/serve-lib.sh"
model=${1:--}
qrun=${2:-$here/build/cli/qrun}
n_gen=${3:-32}
reps=${4:-2}
data=${QRUN_TEST_DATA:-$here/../shared}
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
if [ "$model" = "-" ]; then
  model=/tmp/bench-tinyllama-1.1b-q4_0.gguf
  if [ ! -f "$model" ]; then
    model=$tmp/tinyllama-1.1b-q4_0.gguf
    "$qrun" synth -o "$model" --like tinyllama-1.1b --type q4_0 \
      --vocab "$data/models/TinyLLama-v0-5M-Q4_0.gguf" >/dev/null 2>&1
  fi
fi

clients=${CLIENTS:-1 2 4 8 16}
np=${NP:-8}
llama_server=${LLAMA_SERVER:-/tmp/llama.cpp/build/bin/llama-server}

# Starts `qrun serve` with the given -np on a free port; sets pid and port.
start() {
  # shellcheck disable=SC2086 # QRUN_SERVE_ARGS is a list of flags
  "$qrun" serve -m "$model" -t 2 -c $((256 * $1)) -np "$1" --ignore-eos --port 0 -q \
    ${QRUN_SERVE_ARGS:-} 2>"$tmp/serve.log" &
  pid=$!
  port=$(serve_port "$tmp/serve.log" "$pid")
}

# Starts llama-server with the given -np (the same context per slot) on a free port.
start_llama() {
  port=$(free_port)
  "$llama_server" -m "$model" -t 2 -c $((256 * $1)) -np "$1" --ignore-eos --host 127.0.0.1 \
    --port "$port" >"$tmp/llama.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { tail -5 "$tmp/llama.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "llama-server did not start" >&2
  exit 1
}
stop() {
  kill "$pid"
  wait "$pid" || true
  pid=
}

# CLIENTS concurrent streamed completions of N tokens, REPS rounds (after one warm-up
# round); prints two figures of the best round: generated tokens/s over the round's wall
# time (prompts, HTTP and all), and aggregate decode tokens/s, the sum over clients of
# (tokens after the first) / (time from its first token to its last). That leaves the
# prompts out, and holds while every client decodes at once (clients <= -np; with more, the
# later ones decode after the first ones end, and the sum means nothing: not printed).
load() {
  python3 - "$port" "$1" "$n_gen" "$reps" <<'PY'
import json, sys, threading, time, urllib.request
port, clients, n, reps = (int(a) for a in sys.argv[1:])
def ask(i, out):
    body = json.dumps({"prompt": f"Once upon a time, story {i} began with", "max_tokens": n,
                       "temperature": 0, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text"):
                times.append(time.monotonic())
    out[i] = times
def round_():
    out = [[] for _ in range(clients)]
    threads = [threading.Thread(target=ask, args=(i, out)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    wall = sum(len(t) for t in out) / (time.monotonic() - t0)
    decode = sum((len(t) - 1) / (t[-1] - t[0]) for t in out if len(t) > 1)
    return wall, decode
round_()  # warm-up: pages the weights in, makes the repacked copies
rounds = [round_() for _ in range(reps)]
print(f"{max(w for w, _ in rounds):.3f} {max(d for _, d in rounds):.3f}")
PY
}

declare -A tps dps
configs="qrun-np$np qrun-np1"
if [ "${1:--}" = "-" ]; then
  # llama-server parses what it generates as text and answers 500 to the invalid UTF-8 a
  # random-weight model writes: side by side needs a real model (e.g. Gemma 3 270M).
  echo "llama-server: skipped on the random-weight model (give a real one to compare)"
elif [ -x "$llama_server" ]; then
  configs="$configs llama-np$np"
fi
for config in $configs; do
  case $config in
    qrun-np*) start "${config#qrun-np}" ;;
    llama-np*) start_llama "${config#llama-np}" ;;
  esac
  for c in $clients; do
    read -r wall decode < <(load "$c")
    tps[$config,$c]=$wall
    dps[$config,$c]=$decode
    if [ "$config" = qrun-np1 ] || [ "$c" -gt "$np" ]; then  # not all decoding together
      echo "$config, $c client(s): $wall generated tok/s"
    else
      echo "$config, $c client(s): $wall generated tok/s, $decode decode tok/s"
    fi
  done
  stop
done
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
echo "ratios (same run, same machine):"
for c in $clients; do
  [ "$c" = 1 ] && continue
  line="  qrun -np $np, $c clients / 1 client: $(ratio "${tps[qrun-np$np,$c]}" "${tps[qrun-np$np,1]}")x generated"
  [ "$c" -le "$np" ] && line="$line, $(ratio "${dps[qrun-np$np,$c]}" "${dps[qrun-np$np,1]}")x decode"
  echo "$line"
done
for c in $clients; do
  echo "  $c client(s), qrun -np $np / -np 1 (queued): $(ratio "${tps[qrun-np$np,$c]}" "${tps[qrun-np1,$c]}")x"
done
if [[ $configs == *llama* ]]; then
  for c in $clients; do
    echo "  $c client(s), qrun / llama-server (both -np $np): $(ratio "${tps[qrun-np$np,$c]}" "${tps[llama-np$np,$c]}")x"
  done
fi
