#!/usr/bin/env bash
# Packs what scripts/cuda-device-check.sh needs on a lent GPU machine into a folder (default
# .dev) that travels with the working tree: bin.tar.xz (qrun, the cuda_gpu_* tests and the
# cuda_*_bench benchmarks of a CUDA build, the shared libraries they need beyond glibc,
# libstdc++ and cuBLAS, and the shared models and golden files laid out as ../shared), and,
# when given, llama.cpp's source and a carrier of Gemma 3's tokenizer.
#   scripts/cuda-device-pack.sh BUILD_DIR [DIR]
# BUILD_DIR: a build configured with -DQRUN_CUDA_ARCHITECTURES for the lent GPU (90-real for
# an H100 or H200); its targets are built here first.
# Environment:
#   LLAMA_SRC_TAR: a .tar.xz of llama.cpp's source, copied to DIR/llsrc.tar.xz;
#   QRUN_GEMMA_MODEL: Gemma 3 270M's GGUF (scripts/fetch-models.sh fetches it), from which
#     a one-layer file with its tokenizer is written to DIR/gemma-vocab.gguf.xz.
# On the GPU machine: tar xJf DIR/bin.tar.xz -C DIR, then scripts/cuda-device-check.sh DIR.
set -euo pipefail
build=${1:?usage: scripts/cuda-device-pack.sh BUILD_DIR [DIR]}
dir=${2:-.dev}
data=${QRUN_TEST_DATA:-$(dirname "$0")/../../shared}

targets=(qrun)
mapfile -t -O 1 targets < <(ninja -C "$build" -t targets all 2>/dev/null |
  sed -n 's/^\(cuda_gpu_[a-z0-9_]*_test\|cuda_[a-z0-9_]*_bench\): .*/\1/p' | sort -u)
targets[0]=qrun
ninja -C "$build" "${targets[@]}" > /dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/data/golden"
for t in "${targets[@]}"; do
  cp "$(find "$build" -name "$t" -type f -perm -u+x | head -1)" "$stage/bin/"
done
# Libraries the GPU machine may lack: everything ldd names except the C and C++ runtimes and
# CUDA's own (the machine has a CUDA toolkit).
ldd "$stage"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt|libcublas[^/]*|libcudart)\.so' |
  xargs -r cp -L -t "$stage/lib/"
cp -r "$data/models" "$stage/data/"
# The golden tests on the GPU read the "once" and "park" prompts; the "long" logits (32 MB
# of floats that do not compress) would not fit the 64 MiB a call carries.
find "$data/golden" -maxdepth 1 -type f ! -name '*.long.logits.f32' \
  -exec cp -t "$stage/data/golden/" {} +

mkdir -p "$dir"
tar cJf "$dir/bin.tar.xz" -C "$stage" bin lib data
[ -n "${LLAMA_SRC_TAR:-}" ] && cp "$LLAMA_SRC_TAR" "$dir/llsrc.tar.xz"
if [ -n "${QRUN_GEMMA_MODEL:-}" ]; then
  "$build/cli/qrun" synth --arch gemma3 --vocab "$QRUN_GEMMA_MODEL" --n-embd 32 --n-layer 1 \
    --n-head 1 --n-head-kv 1 --head-dim 32 --n-ff 32 --type q8_0 --tied \
    -o "$stage/gemma-vocab.gguf" > /dev/null
  xz -T2 -c "$stage/gemma-vocab.gguf" > "$dir/gemma-vocab.gguf.xz"
fi
du -ch "$dir"/* | tail -1
