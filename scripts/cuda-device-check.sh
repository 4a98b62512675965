#!/usr/bin/env bash
# The checks and benchmarks to run on a machine with an NVIDIA GPU, from a prepared
# folder (default .dev) that holds qrun and the cuda_gpu_* tests built for it (bin/), the
# shared libraries they need beyond glibc and libstdc++ (lib/), and the shared models and
# golden files (data/, laid out as ../shared). A lent GPU comes with minutes, not hours:
# this runs everything in one go, packs its logs into $OUT/logs.tgz and prints a summary
# last.
#   scripts/cuda-device-check.sh [DIR]
# Environment:
#   QRUN_BENCH_LIKE (default llama-3-8b), QRUN_BENCH_TYPE (q4_0): the synthetic model
#     `qrun synth` makes for the benchmark.
#   QRUN_VARIANTS: environment settings, space-separated (e.g. "QRUN_CUDA_GRAPHS=0"), under
#     which the GPU tests and the decode benchmark run again, one at a time (A/B).
#   LLAMA_SRC: a .tar.xz of llama.cpp's source, built with CUDA for this GPU in the
#     background while the tests run, then benchmarked on the same file as qrun;
#   LLAMA_BENCH: or an llama-bench already built with CUDA.
#   QRUN_BENCH_VARIANTS: settings under which only the decode benchmark runs again (several
#     at once joined by '+', e.g. QRUN_CUDA_NORM=v1+QRUN_CUDA_MMVQ=v5).
#   QRUN_SMALL_VARIANTS: the same for the 1.1B-shaped file's decode benchmark (and the
#     Gemma-shaped one's).
#   QRUN_GEMMA_VOCAB: a GGUF file (or .gguf.xz) that carries Gemma 3's tokenizer, such as
#     `qrun synth --arch gemma3 --vocab gemma-3-270m-q4_k_m.gguf --n-embd 32 --n-layer 1
#     --n-head 1 --n-head-kv 1 --head-dim 32 --n-ff 32 --type q8_0 --tied` writes: qrun and
#     llama.cpp are then benchmarked on a file of Gemma 3 270M Q4_K_M's shapes and tensor
#     types (the real file, 253 MB, is too large to bring along), random weights.
#   QRUN_KERNEL_BENCH_ARGS: arguments for the kernel benchmarks (bin/cuda_*_bench).
#   QRUN_NCU: the files to profile, of 8b, 1.1b and gemma (e.g. "8b gemma"): Nsight Compute
#     (where installed) times every kernel of a decode step (graphs off) and prints the sum
#     per kernel name; Nsight Systems (where installed) sums the CUDA calls and kernels of a
#     whole decode run. 8b-pp and 8b-pp-kvu: the kernels of the 8B file's pp512 (the second
#     with a paged cache), their sums and shares.
set -uo pipefail
dir=${1:-.dev}
out=/tmp/qrun-device-logs  # everything, packed into $OUT/logs.tgz (default ./logs.tgz) at the end
rm -rf "$out"
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export QRUN_TEST_DATA="$dir/data"
# cuBLAS from wherever the machine has CUDA's libraries (a toolkit, or a Python wheel).
if ! ldconfig -p | grep -q 'libcublas\.so\.13'; then
  cublas=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1)
  [ -n "$cublas" ] && export LD_LIBRARY_PATH="$(dirname "$cublas"):$LD_LIBRARY_PATH"
fi
qrun="$dir/bin/qrun"
summary=()
note() { summary+=("$*"); echo "== $*"; }

llama_pid=
if [ -n "${LLAMA_SRC:-}" ]; then
  (set -e; rm -rf /tmp/llsrc; mkdir -p /tmp/llsrc; tar xJf "$LLAMA_SRC" -C /tmp/llsrc
   cmake -S /tmp/llsrc -B /tmp/llsrc/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=native -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
     -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
     -DLLAMA_BUILD_SERVER=OFF
   timeout "${LLAMA_BUILD_TIMEOUT:-330}" ninja -C /tmp/llsrc/build -j "$(( $(nproc) - 2 ))" llama-bench
  ) > "$out/llama_build.log" 2>&1 &
  llama_pid=$!
fi

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"
"$qrun" --version | tail -3

run_tests() {  # $1: an environment setting, or empty
  local t name
  for t in "$dir"/bin/cuda_gpu_*_test; do
    name=$(basename "$t")${1:+.$1}
    if env ${1:+"$1"} timeout 300 "$t" --gtest_brief=1 > "$out/$name.log" 2>&1; then
      note "$name: $(grep -E '^\[  (PASSED|SKIPPED)' "$out/$name.log" | tr '\n' ' ')"
    else
      note "$name: FAILED (rc $?)"
      grep -E "Failure|FAILED|error|Expected|Which is|nmse|row" "$out/$name.log" | head -20
    fi
  done
}
run_tests ""
for v in ${QRUN_VARIANTS:-}; do run_tests "$v"; done

# One real generation each way on a shared model: the same greedy text from CPU and GPU,
# or texts that part where two logits nearly tie (TinyLlama 5M's do after about 25 tokens
# on an H100; the KL divergences below bound the difference).
m="$dir/data/models/TinyLLama-v0-5M-Q4_K_M.gguf"
args=(-m "$m" -p "Once upon a time" -n 48 --temp 0 --seed 1)
"$qrun" run "${args[@]}" -ngl 0 > "$out/gen_cpu.txt" 2> "$out/gen_cpu.err"
"$qrun" run "${args[@]}" -ngl all > "$out/gen_gpu.txt" 2> "$out/gen_gpu.err"
if cmp -s "$out/gen_cpu.txt" "$out/gen_gpu.txt"; then
  note "greedy text, CPU vs GPU: identical"
else
  note "greedy text, CPU vs GPU: DIFFERENT"
  cat "$out/gen_cpu.txt"; echo; cat "$out/gen_gpu.txt"; echo; tail -3 "$out/gen_gpu.err"
fi

# Speculative decoding on the GPU, a draft model's passes and prompt lookup's: verification
# passes run as decode rows (each row bit for bit its token alone), so the greedy text is
# plain decoding's on the same device.
d="$dir/data/models/TinyLLama-v0-5M-Q8_0.gguf"
for spec in "-md $d" "--lookup-ngram 2"; do
  # shellcheck disable=SC2086  # (spec holds two words)
  "$qrun" run "${args[@]}" -ngl all $spec > "$out/gen_gpu_spec.txt" 2> "$out/gen_gpu_spec.err"
  if cmp -s "$out/gen_gpu.txt" "$out/gen_gpu_spec.txt"; then
    note "greedy text, GPU plain vs GPU ${spec%% *}: identical"
  else
    note "greedy text, GPU plain vs GPU ${spec%% *}: DIFFERENT"
    cat "$out/gen_gpu_spec.txt"; echo; tail -3 "$out/gen_gpu_spec.err"
  fi
done

# qrun serve on the GPU: with -np 2, two greedy completions at once, each compared with
# the text `qrun run -ngl all` gave, both from the paged pool (the default, a block table per
# sequence) and from a cache of its own per slot (--no-kv-unified).
# shellcheck source=scripts/serve-lib.sh
. "$(dirname "$0")/serve-lib.sh"
serve_check() {  # $1: a name for the logs, then serve's extra flags
  local name=$1 serve_pid port
  shift
  "$qrun" serve -m "$m" -ngl all -np 2 --port 0 "$@" > "$out/serve_$name.log" 2>&1 &
  serve_pid=$!
  if port=$(serve_port "$out/serve_$name.log" "$serve_pid" 2> "$out/serve_start_$name.err"); then
    python3 - "$port" "$out/gen_gpu.txt" > "$out/serve_check_$name.txt" 2>&1 <<'PY'
import concurrent.futures, json, sys, urllib.request
port, want = sys.argv[1], open(sys.argv[2]).read()
def complete(_):
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0,
                       "seed": 1}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["text"]
with concurrent.futures.ThreadPoolExecutor(2) as pool:
    texts = list(pool.map(complete, range(2)))
print("same as qrun run -ngl all:", [t == want for t in texts])
for t in texts: print(repr(t))
PY
    note "serve -ngl all -np 2 $*: $(head -1 "$out/serve_check_$name.txt")"
  else
    note "serve -ngl all -np 2 $*: did not start: $(tail -2 "$out/serve_start_$name.err" | tr '\n' ' ')"
  fi
  kill "$serve_pid" 2>/dev/null
  wait "$serve_pid" 2>/dev/null
}
serve_check paged
serve_check slots --no-kv-unified
# The two caches hold the same rows: their texts should be the same, pair for pair (on
# CUDA a batched step's sums can part from a single sequence's; docs/DESIGN.md).
if cmp -s "$out/serve_check_paged.txt" "$out/serve_check_slots.txt"; then
  note "serve texts, paged pool vs a cache per slot: identical"
else
  note "serve texts, paged pool vs a cache per slot: DIFFERENT"
fi

like=${QRUN_BENCH_LIKE:-llama-3-8b}
type=${QRUN_BENCH_TYPE:-q4_0}
big=/tmp/bench-$like-$type.gguf
[ -f "$big" ] || "$qrun" synth --like "$like" --type "$type" -o "$big" 2>&1 | tail -1
small=/tmp/bench-tinyllama-1.1b-$type.gguf
[ -f "$small" ] || "$qrun" synth --like tinyllama-1.1b --type "$type" -o "$small" 2>&1 | tail -1

# KL divergence of the GPU's next-token distributions from the CPU's, on the same text:
# a real model (TinyLlama 5M), a Gemma-3-shaped synthetic one whose 512-token chunks run
# past its 128-position sliding window, and the 1.1B-shaped benchmark file (its Q4_0
# matrices repacked for the decode kernels).
"$qrun" synth --arch gemma3 --like smollm-135m --type q4_k_m --sliding-window 128 \
  -o /tmp/gemma3-synth.gguf 2>&1 | tail -1
for km in "$dir/data/models/TinyLLama-v0-5M-Q4_K_M.gguf" /tmp/gemma3-synth.gguf "$small"; do
  kb=/tmp/$(basename "$km").kld
  "$qrun" perplexity -m "$km" -f README.md -c 512 --chunks 4 --kl-divergence-base "$kb" \
    > /dev/null 2>&1
  "$qrun" perplexity -m "$km" -ngl all -c 512 --kl-divergence-base "$kb" --kl-divergence \
    > "$out/kld_$(basename "$km").txt" 2>&1
  note "KLD GPU vs CPU, $(basename "$km"): $(grep -E 'Mean +KLD|Same top p:' "$out/kld_$(basename "$km").txt" | tr -s ' ' | tr '\n' ' ')"
done

# The kernel benchmarks and the profile time the GPU alone: they run while llama.cpp builds.
for b in "$dir"/bin/cuda_*_bench; do
  [ -x "$b" ] || continue
  timeout 120 "$b" ${QRUN_KERNEL_BENCH_ARGS:-} > "$out/$(basename "$b").txt" 2>&1
  tail -25 "$out/$(basename "$b").txt"
done
# A file of Gemma 3 270M Q4_K_M's shapes and types, when its tokenizer came along.
gemma=
if [ -n "${QRUN_GEMMA_VOCAB:-}" ]; then
  vocab=$QRUN_GEMMA_VOCAB
  if [[ $vocab == *.xz ]]; then
    xz -dc "$vocab" > /tmp/gemma-vocab.gguf
    vocab=/tmp/gemma-vocab.gguf
  fi
  gemma=/tmp/gemma-3-270m-shape-q4_k_m.gguf
  "$qrun" synth --arch gemma3 --vocab "$vocab" --n-embd 640 --n-layer 18 --n-head 4 \
    --n-head-kv 1 --head-dim 256 --n-ff 2048 --sliding-window 512 --ctx 32768 \
    --type q4_k_m --tied -o "$gemma" 2>&1 | tail -1
fi
profile() {  # $1: a name for the logs, $2: the model file
  # A decode step is n_layer times the same kernels: skip the load, the warm-up and the
  # first steps, then time 400 launches (a step of the 8B file and more, a step and a half
  # of the Gemma-shaped one) one by one. No cache flush and no clock lock, so that the
  # small kernels' times are those of a real decode step.
  local name=$1 file=$2
  if command -v ncu > /dev/null; then
    QRUN_CUDA_GRAPHS=0 timeout 120 ncu --launch-skip 3000 --launch-count 400 --csv \
      --cache-control none --clock-control none \
      --print-kernel-base function --metrics gpu__time_duration.sum \
      "$qrun" bench -ngl all -m "$file" -p 0 -n 32 -r 1 > "$out/ncu_$name.csv" 2> "$out/ncu_$name.err"
    # Sum and count per kernel (the CSV's 5th field; times in the last, in the unit before).
    echo "== ncu, $name: the sum per kernel over 400 launches"
    grep '"gpu__time_duration.sum"' "$out/ncu_$name.csv" |
      awk -F'","' '{name=$5; t=$NF; gsub(/[",]/, "", t);
                    unit=$(NF-1); s[name]+=t; n[name]++; u[name]=unit}
                   END {for (k in s) printf "%10.1f %s x%d %s\n", s[k], u[k], n[k], k}' |
      sort -rn | head -24 | tee "$out/ncu_summary_$name.txt"
  fi
  # Nsight Systems, where the machine has it: the time the host spends in each CUDA call
  # and the GPU in each kernel over a whole decode run, graphs off, PDL as set.
  if command -v nsys > /dev/null; then
    timeout 120 nsys profile -o "/tmp/nsys_$name" --force-overwrite true \
      "$qrun" bench -ngl all -m "$file" -p 0 -n 64 -r 1 > "$out/nsys_$name.log" 2>&1
    timeout 120 nsys stats --report cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum \
      --format csv --output "$out/nsys_$name" "/tmp/nsys_$name.nsys-rep" > /dev/null 2>&1
    for f in "$out/nsys_$name"_*.csv; do
      [ -f "$f" ] && { echo "== $(basename "$f")"; head -14 "$f" | cut -c1-200; }
    done
  fi
}
profile_prefill() {  # $1: a name for the logs, $2: the model file, then bench's extra flags
  # Two pp512 runs (the warm-up and one timed), every launch timed; the weights' repacking
  # at load (repack_g8_kernel) is left out of the sums.
  local name=$1 file=$2
  shift 2
  command -v ncu > /dev/null || return 0
  QRUN_CUDA_GRAPHS=0 timeout 170 ncu --launch-count 4000 --csv --cache-control none \
    --clock-control none --print-kernel-base function --metrics gpu__time_duration.sum \
    "$qrun" bench -ngl all -m "$file" -p 512 -n 0 -r 1 "$@" \
    > "$out/ncu_$name.csv" 2> "$out/ncu_$name.err"
  echo "== ncu, $name: the sum per kernel over two pp512 runs (ns), and its share"
  grep '"gpu__time_duration.sum"' "$out/ncu_$name.csv" | grep -v '"repack_g8_kernel"' |
    awk -F'","' '{t=$NF; gsub(/[",]/, "", t); s[$5]+=t; n[$5]++; total+=t}
                 END {for (k in s) printf "%12.0f %5.1f%% x%d %s\n", s[k], 100*s[k]/total, n[k],
                      substr(k, 1, 60)}' |
    sort -rn | head -24 | tee "$out/ncu_summary_$name.txt"
}
for name in ${QRUN_NCU:-}; do
  case $name in
    8b) profile 8b "$big" ;;
    8b-pp) profile_prefill 8b-pp "$big" ;;
    8b-pp-kvu) profile_prefill 8b-pp-kvu "$big" --kv-unified ;;
    1.1b) profile 1.1b "$small" ;;
    gemma) [ -n "$gemma" ] && profile gemma "$gemma" ;;
  esac
done
# Benchmarks on an idle machine: wait for llama.cpp's build first.
if [ -n "$llama_pid" ]; then
  if wait "$llama_pid"; then
    LLAMA_BENCH=/tmp/llsrc/build/bin/llama-bench
  else
    note "llama.cpp build failed: $(tail -3 "$out/llama_build.log" | tr '\n' ' ')"
  fi
fi
bench() {  # $1: log name, $2: environment settings joined by '+', or empty; then qrun bench's arguments
  local log=$1 setting=$2
  shift 2
  local settings=()
  [ -n "$setting" ] && IFS=+ read -r -a settings <<< "$setting"
  env "${settings[@]}" timeout 240 "$qrun" bench -ngl all -r 3 "$@" > "$out/$log.txt" 2>&1
  note "qrun ${setting:-default} $*: $(grep -E '^\|.*\| *(pp|tg)[0-9]+[^|]*\|' "$out/$log.txt" | awk -F'|' '{print $7 $8 $10}' | tr -s ' ' | tr '\n' ';')"
}
llama() {  # $1: model file
  [ -n "${LLAMA_BENCH:-}" ] || return 0
  local log="$out/bench_llama_$(basename "$1").txt"
  timeout 240 "$LLAMA_BENCH" -m "$1" -ngl 99 -p 512 -n 128 -r 3 > "$log" 2>&1
  note "llama.cpp $(basename "$1"): $(grep -E '^\|.*\| *(pp|tg)[0-9]+ *\|' "$log" | awk -F'|' '{print $(NF-2) $(NF-1)}' | tr -s ' ' | tr '\n' ';')"
}
# The two tools alternate on each file, the most important comparison first.
bench bench_qrun "" -m "$big" -p 512 -n 128
llama "$big"
# What paging costs (qrun serve's default cache): prefill gathers each chunk's rows, and a
# batched decode step reads four sequences through their block tables.
bench bench_qrun_np4 "" -m "$big" -p 0 -n 128 --parallel 4
bench bench_qrun_kvu "" -m "$big" -p 512 -n 128 --parallel 1,4 --kv-unified
# Batched decode of 8 and 16 sequences: decode rows through MMVQ (the default, each row
# as alone) against the F16 GEMM that such steps took before (kMaxDecodeRows, unmeasured).
bench bench_qrun_np8 "" -m "$big" -p 0 -n 64 --parallel 8,16
bench bench_qrun_np8.rows_off "QRUN_CUDA_DECODE_ROWS=0" -m "$big" -p 0 -n 64 --parallel 8,16
for v in ${QRUN_VARIANTS:-} ${QRUN_BENCH_VARIANTS:-}; do
  bench "bench_qrun.$v" "$v" -m "$big" -p 0 -n 128
done
bench bench_qrun_small "" -m "$small" -p 512 -n 128
llama "$small"
for v in ${QRUN_SMALL_VARIANTS:-}; do
  bench "bench_qrun_small.$v" "$v" -m "$small" -p 0 -n 128
done
if [ -n "$gemma" ]; then
  bench bench_qrun_gemma "" -m "$gemma" -p 512 -n 128
  llama "$gemma"
  for v in ${QRUN_SMALL_VARIANTS:-}; do
    bench "bench_qrun_gemma.$v" "$v" -m "$gemma" -p 0 -n 128
  done
fi
# Half the layers on the GPU, the rest on this machine's CPU (-ngl N), decode only.
timeout 240 "$qrun" bench -ngl 16 -m "$big" -p 0 -n 32 -r 3 > "$out/bench_split.txt" 2>&1
note "qrun -ngl 16 (split): $(grep -E '^\|.*\| *(pp|tg)[0-9]+ *\|' "$out/bench_split.txt" | awk -F'|' '{print $7 $8}' | tr -s ' ' | tr '\n' ';')"
tail -3 "$out/bench_qrun.txt"
tar czf "${OUT:-.}/logs.tgz" -C "$out" .
printf '%s\n' "${summary[@]}"
