#!/usr/bin/env bash
# Builds the instruction-counting qemu-user plugin (insn_count.c) against the plugin header
# of a QEMU source tree, which stays outside this repository. Use the tree of the QEMU that
# will load the plugin: QEMU refuses a plugin built for a newer plugin API than its own
# (Debian bookworm's qemu-user is 7.2, plugin API 1: `apt-get source qemu` gives its tree).
# Usage: tools/qemu-insn-count/build.sh QEMU_SOURCE_TREE [OUTPUT.so]
#   default output: build/qemu-insn-count/libinsn_count.so
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 QEMU_SOURCE_TREE [OUTPUT.so]" >&2
  exit 2
fi
qemu_src=$1
here=$(cd "$(dirname "$0")" && pwd)
out=${2:-$here/../../build/qemu-insn-count/libinsn_count.so}
header=$qemu_src/include/qemu/qemu-plugin.h
if [[ ! -f $header ]]; then
  echo "$0: no $header (give the top of a QEMU source tree)" >&2
  exit 1
fi
# QEMU 8.0 and later include <glib.h> from the plugin header.
glib_flags=""
if grep -q '<glib.h>' "$header"; then glib_flags=$(pkg-config --cflags glib-2.0); fi
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086
${CC:-cc} -std=gnu11 -O2 -Wall -Wextra -Wno-unused-parameter -fPIC -shared -fvisibility=hidden \
  -I"$qemu_src/include" $glib_flags -o "$out" "$here/insn_count.c"
echo "$out"
