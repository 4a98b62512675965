#!/usr/bin/env python3
"""Finds the innermost loop of one function in a clang AArch64 assembly file and prints it
as llvm-mca input (used by scripts/arm64-mca.sh).

A loop is a branch to a label defined earlier in the same function; innermost loops contain
no other loop. Of those, the one doing the most int8 products is the hot loop: SDOT/UDOT
16, SMMLA/UMMLA/USMMLA 32, SMULL/SMULL2/SMLAL/SMLAL2 into .8h lanes 8 (the widening
multiplies of the armv8-a kernels); wider multiplies (scales, mins) do not count. Prints,
on stderr, one line: the int8 products one iteration does and its number of instructions;
on stdout, the loop's instructions.
Usage: arm64_mca_loops.py FILE.s FUNCTION_REGEX
"""
import re
import subprocess
import sys

MACS = {"sdot": 16, "udot": 16, "smmla": 32, "ummla": 32, "usmmla": 32}
WIDENING = ("smull", "smull2", "smlal", "smlal2", "umull", "umull2")


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def functions(lines):
    """(name, first line, end line) of every function in the file (clang or GCC output)."""
    starts = [(i, l.split(":")[0]) for i, l in enumerate(lines)
              if re.match(r"^[_A-Za-z][\w.$]*:(\s|$)", l)]
    result = []
    for k, (i, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        result.append((name, i, end))
    return result


def macs(insn):
    parts = insn.split()
    op = parts[0]
    if op in MACS:
        return MACS[op]
    if op in WIDENING and parts[1].endswith(".8h,"):
        return 8
    return 0


def is_insn(line):
    return line.startswith("\t") and not line.strip().startswith((".", "//", "@"))


def hot_loops(lines, start, end):
    """The innermost loops of lines[start:end], as lists of instructions."""
    labels = {}
    loops = []
    for i in range(start, end):
        l = lines[i].strip()
        m = re.match(r"^(\.L\w+):", l)
        if m:
            labels[m.group(1)] = i
            continue
        m = re.match(r"^(b\.\w+|b|cbn?z|tbn?z)\s.*?(\.L\w+)$", l)
        if m and m.group(2) in labels:
            loops.append((labels[m.group(2)], i))
    inner = [lp for lp in loops
             if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]
    return [[lines[i].strip() for i in range(a + 1, b + 1) if is_insn(lines[i])]
            for a, b in inner]


def main():
    path, pattern = sys.argv[1], sys.argv[2]
    lines = [l.rstrip("\n") for l in open(path)]
    funcs = functions(lines)
    names = demangle([f[0] for f in funcs])
    matching = [f for f in funcs if re.search(pattern, names[f[0]])]
    if not matching:
        sys.exit(f"{path}: no function matches {pattern!r}")

    def work(insns):
        return sum(macs(x) for x in insns)

    # The hottest innermost loop of the matching functions; failing that, a loop-free
    # function body (a helper its caller's loop calls once per iteration).
    kind = "loop"
    candidates = [lp for f in matching for lp in hot_loops(lines, f[1], f[2]) if work(lp)]
    if not candidates:
        kind = "body"
        candidates = [[lines[i].strip() for i in range(f[1], f[2]) if is_insn(lines[i])]
                      for f in matching]
    insns = max(candidates, key=lambda b: (work(b), -len(b)))
    if work(insns) == 0:
        sys.exit(f"{path}: no int8 multiplies in the functions matching {pattern!r}")
    print(f"{work(insns)} {len(insns)} {kind}", file=sys.stderr)
    print("\n".join(insns))


if __name__ == "__main__":
    main()
