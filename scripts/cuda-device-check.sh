#!/usr/bin/env bash
# The checks and benchmarks to run on a machine with an NVIDIA GPU, from a prepared
# folder (default .dev) that holds qrun and the cuda_gpu_* tests built for it (bin/), the
# shared libraries they need beyond glibc and libstdc++ (lib/), and the shared models and
# golden files (data/, laid out as ../shared). A lent GPU comes with minutes, not hours:
# this runs everything in one go, writes logs to $OUT (default ./out) and prints a summary
# last.
#   scripts/cuda-device-check.sh [DIR]
# Environment: QRUN_BENCH_LIKE (default llama-3-8b) and QRUN_BENCH_TYPE (q4_0), the
# synthetic model `qrun synth` makes for the benchmark; LLAMA_BENCH, a llama-bench built
# with CUDA to run on the same file (skipped when unset).
set -uo pipefail
dir=${1:-.dev}
out=${OUT:-./out}
mkdir -p "$out"
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

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"
"$qrun" --version | tail -3

for t in "$dir"/bin/cuda_gpu_*_test; do
  name=$(basename "$t")
  if timeout 300 "$t" --gtest_brief=1 > "$out/$name.log" 2>&1; then
    note "$name: $(grep -E '^\[  (PASSED|SKIPPED)' "$out/$name.log" | tr '\n' ' ')"
  else
    note "$name: FAILED (rc $?)"
    grep -E "Failure|FAILED|error|Expected|Which is|nmse|row" "$out/$name.log" | head -20
  fi
done

# One real generation each way on a shared model: the same greedy text from CPU and GPU.
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

# KL divergence of the GPU's next-token distributions from the CPU's, on the same text:
# a real model (TinyLlama 5M) and a Gemma-3-shaped synthetic one whose 512-token chunks run
# past its 128-position sliding window.
"$qrun" synth --arch gemma3 --like smollm-135m --type q4_k_m --sliding-window 128 \
  -o /tmp/gemma3-synth.gguf 2>&1 | tail -1
for km in "$dir/data/models/TinyLLama-v0-5M-Q4_K_M.gguf" /tmp/gemma3-synth.gguf; do
  kb=/tmp/$(basename "$km").kld
  "$qrun" perplexity -m "$km" -f README.md -c 512 --chunks 4 --kl-divergence-base "$kb" \
    > /dev/null 2>&1
  "$qrun" perplexity -m "$km" -ngl all -c 512 --kl-divergence-base "$kb" --kl-divergence \
    > "$out/kld_$(basename "$km").txt" 2>&1
  note "KLD GPU vs CPU, $(basename "$km"): $(grep -E 'Mean +KLD|Same top p:' "$out/kld_$(basename "$km").txt" | tr -s ' ' | tr '\n' ' ')"
done

like=${QRUN_BENCH_LIKE:-llama-3-8b}
type=${QRUN_BENCH_TYPE:-q4_0}
big=/tmp/bench-$like-$type.gguf
[ -f "$big" ] || "$qrun" synth --like "$like" --type "$type" -o "$big" 2>&1 | tail -1
# The copy bandwidth of the card (bytes read plus written), the roofline of decoding.
python3 - <<'PY' 2>&1 | tee "$out/bandwidth.txt"
import torch
a = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20): b.copy_(a)
e.record(); torch.cuda.synchronize()
print("device copy: %.0f GB/s (read + write)" % (2 * a.numel() * 20 / (s.elapsed_time(e) / 1e3) / 1e9))
PY
timeout 240 "$qrun" bench -m "$big" -ngl all -p 512 -n 128 -r 3 > "$out/bench_qrun.txt" 2>&1
tail -8 "$out/bench_qrun.txt"
small=/tmp/bench-tinyllama-1.1b-$type.gguf
[ -f "$small" ] || "$qrun" synth --like tinyllama-1.1b --type "$type" -o "$small" 2>&1 | tail -1
timeout 120 "$qrun" bench -m "$small" -ngl all -p 0 -n 128 -r 3 > "$out/bench_qrun_small.txt" 2>&1
tail -4 "$out/bench_qrun_small.txt"
if [ -n "${LLAMA_BENCH:-}" ]; then
  timeout 240 "$LLAMA_BENCH" -m "$big" -ngl 99 -p 512 -n 128 -r 3 > "$out/bench_llama.txt" 2>&1
  tail -8 "$out/bench_llama.txt"
fi
printf '%s\n' "${summary[@]}"
