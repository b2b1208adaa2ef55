#!/usr/bin/env python3
"""Reads a ptxas -v report and fails when a kernel spills registers or has
its wgmma instructions serialized (ptxas's performance warning C7510, e.g.
for a function call while wgmmas are in flight).

Usage: ptxas_spills.py REPORT
Prints 'kernels: N, spilling: M' and, for each spilling kernel, 'spill: NAME
S bytes stores, L bytes loads', and for each serialized one 'serialized
wgmma: NAME'; exits 1 if any.
"""
import argparse
import re
import sys

parser = argparse.ArgumentParser()
parser.add_argument("report")
args = parser.parse_args()

entry = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
spill = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
serialized = re.compile(r"wgmma\.mma_async instructions are serialized.* in the "
                        r"function '([^']+)'")
current, kernels, bad, slow = None, 0, [], []
with open(args.report) as f:
    for line in f:
        m = entry.search(line)
        if m:
            current = m.group(1)
            kernels += 1
            continue
        m = serialized.search(line)
        if m:
            slow.append(m.group(1))
            continue
        m = spill.search(line)
        if m and current and (int(m.group(1)) or int(m.group(2))):
            bad.append((current, m.group(1), m.group(2)))
print(f"kernels: {kernels}, spilling: {len(bad)}")
for name, stores, loads in bad:
    print(f"spill: {name} {stores} bytes stores, {loads} bytes loads")
for name in slow:
    print(f"serialized wgmma: {name}")
sys.exit(1 if bad or slow or kernels == 0 else 0)
