#!/usr/bin/env bash
# Time to first token of each turn of a 5-turn `qrun chat` driven through stdin, read from
# /stats: with the KV cache kept across turns each turn feeds only its new tokens. Then the
# same turn-5 prompt prefilled from an empty cache (`qrun run -n 1`) for comparison.
# Usage: scripts/chat_ttft.sh [MODEL.gguf] [TEMPLATE.jinja] [QRUN]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$here/../shared/models/TinyLLama-v0-5M-Q8_0.gguf}
template=${2:-$here/../shared/templates/microsoft-Phi-3.5-mini-instruct.jinja}
qrun=${3:-$here/build/rel/cli/qrun}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
system="You are a storyteller for small children."
input=""
for i in 1 2 3 4 5; do
  input+="Tell me a story about a little girl named Lily who found a shiny red ball in the park on day $i, and what she did with it."$'\n'"/stats"$'\n'
done
input+="/save $tmp/conv.json"$'\n'
printf '%s' "$input" |
  "$qrun" chat -m "$model" --chat-template-file "$template" --temp 0 -n 64 -t 2 -q -sys "$system" \
    2>&1 >/dev/null | grep '^last reply' | nl
# The turn-5 prompt: the conversation before the last reply, with the generation prompt.
python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
j = json.load(open(f"{d}/conv.json"))
messages = [{"role": "system", "content": j["system_prompt"]}] + j["messages"][:-1]
json.dump(messages, open(f"{d}/turn5.json", "w"))
PY
"$qrun" template -m "$model" --chat-template-file "$template" --messages "$tmp/turn5.json" \
  --add-generation-prompt >"$tmp/turn5.txt"
"$qrun" run -m "$model" -f "$tmp/turn5.txt" -n 1 --temp 0 -t 2 --json 2>/dev/null |
  python3 -c 'import json,sys; j=json.load(sys.stdin); print("turn 5 from an empty cache: %d prompt tokens, time to first token %.1f ms" % (j["n_prompt_tokens"], j["timings"]["ttft_ms"]))'
