#!/usr/bin/env bash
# Two `qrun serve` replicas behind nginx on the loopback, as docs/SERVING.md sets them up,
# and the checks that the set-up does what it says:
#   - requests without a session header are spread over both replicas (least connections);
#   - requests with the same X-Session-Id all reach one replica (consistent hashing), so a
#     conversation keeps that replica's KV cache;
#   - a streamed reply passes through unbuffered and ends with data: [DONE];
#   - /health answers through the balancer, and a replica that stops is routed around.
# Each replica's share is read from its own /metrics. Exits non-zero when a check fails.
# Usage: scripts/serve-replicas.sh [QRUN] [MODEL.gguf]   (default: build/cli/qrun and its
# embedded demo model). Needs nginx (Debian's package) and curl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/serve-lib.sh
. "$root/scripts/serve-lib.sh"
qrun=${1:-$root/build/cli/qrun}
model=${2:-}
command -v nginx > /dev/null || { echo "serve-replicas.sh: nginx not found (apt-get install nginx)" >&2; exit 2; }
command -v curl > /dev/null || { echo "serve-replicas.sh: curl not found" >&2; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  [ -f "$tmp/nginx.pid" ] && kill "$(cat "$tmp/nginx.pid")" 2> /dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Starts a replica on a port of its own choosing (it prints it on stderr).
start_replica() {
  local args=(serve --port 0 -np 2 -c 1024 -t 1 -q)
  [ -n "$model" ] && args+=(-m "$model")
  "$qrun" "${args[@]}" > /dev/null 2> "$tmp/$1.log" &
  pids+=($!)
}
start_replica a
start_replica b
port_a=$(serve_port "$tmp/a.log")
port_b=$(serve_port "$tmp/b.log")
port_lb=$(free_port)
chmod 755 "$tmp"  # nginx's workers (another user) make their temporary folders there
sed -e "s|@TMP@|$tmp|g" -e "s|@LB@|$port_lb|g" -e "s|@A@|$port_a|g" -e "s|@B@|$port_b|g" \
  "$root/docs/serving/nginx-qrun.conf" > "$tmp/nginx.conf"
nginx -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/error.log"
lb=http://127.0.0.1:$port_lb
for _ in $(seq 1 100); do curl -fs "$lb/health" > /dev/null && break || sleep 0.1; done

failed=0
check() {  # check NAME ARITHMETIC-EXPRESSION
  if (($2)); then echo "ok: $1"; else echo "FAILED: $1"; failed=1; fi
}

# Completions answered by the replica on `port` so far (200s on /v1/completions).
served() {
  curl -fs "http://127.0.0.1:$1/metrics" |
    sed -n 's|^qrun_http_responses_total{route="/v1/completions",status="200"} \([0-9]*\)$|\1|p' |
    head -1 | sed 's/^$/0/'
}
complete() {  # complete [HEADER]
  local body='{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}'
  curl -fs -H 'Content-Type: application/json' ${1:+-H "$1"} -d "$body" "$lb/v1/completions"
}

health=$(curl -fs "$lb/health" -o /dev/null -w '%{http_code}' || true)
check "/health through nginx" "$health == 200"

# Concurrent requests with no session: least connections sends them to both replicas.
a0=$(served "$port_a")
b0=$(served "$port_b")
requests=()
for i in $(seq 1 8); do
  complete > "$tmp/free.$i" &
  requests+=($!)
done
for r in "${requests[@]}"; do wait "$r" || true; done
a1=$(served "$port_a")
b1=$(served "$port_b")
check "8 requests without a session answered" "a1 - a0 + b1 - b0 == 8"
check "without a session both replicas serve (a $((a1 - a0)), b $((b1 - b0)))" \
  "a1 - a0 > 0 && b1 - b0 > 0"

# One session's requests, one after the other: all on one replica; another session's too.
for session in alice bob carol; do
  a0=$(served "$port_a")
  b0=$(served "$port_b")
  for _ in 1 2 3 4; do complete "X-Session-Id: $session" > /dev/null; done
  a1=$(served "$port_a")
  b1=$(served "$port_b")
  check "session $session stays on one replica (a $((a1 - a0)), b $((b1 - b0)))" \
    "(a1 - a0 == 4 && b1 == b0) || (a1 == a0 && b1 - b0 == 4)"
done

# A streamed reply through the balancer.
curl -fsN -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "stream": true}' \
  "$lb/v1/completions" > "$tmp/stream.txt"
done_seen=$(grep -c '^data: \[DONE\]' "$tmp/stream.txt" || true)
events=$(grep -c '^data: ' "$tmp/stream.txt" || true)
check "a stream passes through and ends with [DONE]" "done_seen == 1"
check "a stream arrives as several events ($events)" "events >= 3"

# One replica stops: nginx marks it failed and the other answers.
kill "${pids[0]}"
wait "${pids[0]}" 2> /dev/null || true
ok=0
for _ in 1 2 3 4; do complete > /dev/null && ok=$((ok + 1)); done
check "with replica a stopped, 4 of 4 requests are answered" "ok == 4"

[ "$failed" -eq 0 ] && echo "serve-replicas.sh: all checks passed"
exit "$failed"
