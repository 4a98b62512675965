# shellcheck shell=bash
# Shell functions for the scripts that start `qrun serve` (sourced, not run).

# The port the server writing log $1 listens on, once it says so (it was started with
# --port 0). Exits 1 with the log when process $2 (if given) has ended, or after a minute.
serve_port() {
  local log=$1 pid=${2:-} port
  for _ in $(seq 600); do
    port=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$log")
    if [ -n "$port" ]; then
      echo "$port"
      return 0
    fi
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "qrun serve did not start: $(cat "$log")" >&2
  exit 1
}

# A TCP port free on the loopback now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
