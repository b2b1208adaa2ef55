#!/usr/bin/env python3
"""Checks which tensor-core instructions the kernels of a CUDA binary hold.

Reads `cuobjdump -sass` output (a file, or stdin with "-") and, for each
--require PATTERN=INSTRUCTION, requires every kernel whose mangled name
contains PATTERN (a regular expression) to hold INSTRUCTION at least once
(e.g. HGMMA, wgmma on sm_90a; HMMA, mma.sync). A pattern that names no
kernel fails too, so a renamed kernel cannot pass unseen. Prints a line per
pattern with the kernels it matched and their instruction counts
(docs/cuda.md, "Testing without a GPU").

    cuobjdump -sass libmodel.so | scripts/check-sass.py - \
        --require gemmWgKernel=HGMMA --require gemmTcKernel=HMMA
"""
import argparse
import re
import sys


def kernels(lines):
    """(name, [instruction lines]) for each function of the listing."""
    name, body = None, []
    for line in lines:
        header = re.search(r"Function : (\S+)", line)
        if header:
            if name is not None:
                yield name, body
            name, body = header.group(1), []
        elif name is not None:
            body.append(line)
    if name is not None:
        yield name, body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass", help="cuobjdump -sass output, or - for stdin")
    parser.add_argument("--require", action="append", default=[],
                        metavar="PATTERN=INSTRUCTION",
                        help="kernels matching PATTERN must hold INSTRUCTION")
    args = parser.parse_args()
    rules = []
    for rule in args.require:
        pattern, sep, instruction = rule.partition("=")
        if not sep or not pattern or not re.fullmatch(r"[A-Z0-9.]+", instruction):
            parser.error(f"--require {rule!r}: expected PATTERN=INSTRUCTION, "
                         "e.g. gemmWgKernel=HGMMA")
        rules.append((re.compile(pattern), instruction))
    if not rules:
        parser.error("give at least one --require")
    source = sys.stdin if args.sass == "-" else open(args.sass)
    with source:
        listing = list(kernels(source))
    if not listing:
        print("check-sass: no kernels in the listing (is it cuobjdump -sass "
              "output?)", file=sys.stderr)
        return 1
    failed = False
    for pattern, instruction in rules:
        opcode = re.compile(r"\b" + re.escape(instruction) + r"\b")
        counts = [(name, sum(1 for l in body if opcode.search(l)))
                  for name, body in listing if pattern.search(name)]
        missing = [name for name, count in counts if count == 0]
        print(f"check-sass: {pattern.pattern}: {len(counts)} kernels, "
              f"{sum(c for _, c in counts)} {instruction} "
              f"(each {min((c for _, c in counts), default=0)} to "
              f"{max((c for _, c in counts), default=0)})")
        if not counts:
            print(f"check-sass: FAILED: no kernel matches {pattern.pattern}",
                  file=sys.stderr)
            failed = True
        for name in missing:
            print(f"check-sass: FAILED: {name} holds no {instruction}",
                  file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
