#!/usr/bin/env python3
"""Checks that every kernel launch an emulated package made would also start
on a GPU, against what nvcc compiled for the same source.

The CPU emulation of CUDA logs each distinct launch (MODC_EMU_LAUNCH_LOG:
'launch SYMBOL THREADS DYNAMIC_SHARED_BYTES'); nvcc -ptx gives each kernel's
launch bounds (.maxntid, .reqntid) and ptxas -v its registers and static
shared memory. A GPU refuses a launch whose block exceeds the kernel's
launch bounds, whose warps need more than the SM's 64 K registers (each
warp's registers allocated in units of 256), or whose static plus dynamic
shared memory exceeds what a block may have (227 KiB on sm_90, 163 KiB on
sm_80).

Usage: launch_limits.py --log LOG --ptx MODEL.ptx --ptxas REPORT
                        --max-shared BYTES
Prints 'launches: N, kernels: K, refused: R' and a line 'refused: SYMBOL:
why' for each refused launch; exits 1 if any, or if a launched kernel is
missing from the PTX or the report (the names must match to check anything).
"""
import argparse
import math
import re
import sys

REGISTERS_PER_SM = 64 * 1024
REGISTER_UNIT = 256  # registers per warp are allocated in units of 256

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--ptx", required=True)
parser.add_argument("--ptxas", required=True)
parser.add_argument("--max-shared", type=int, required=True)
args = parser.parse_args()

# Launch bounds, from the PTX: the directives after '.entry NAME(' and before
# the body's '{'.
bounds = {}
current = None
entry = re.compile(r"^\.(?:visible\s+)?\.entry\s+(\S+?)\(")
ntid = re.compile(r"^\.(maxntid|reqntid)\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?")
with open(args.ptx) as f:
    for line in f:
        line = line.strip()
        m = entry.match(line)
        if m:
            current = m.group(1)
            bounds[current] = {}
            continue
        if current is None:
            continue
        m = ntid.match(line)
        if m:
            dims = [int(d) for d in m.groups()[1:] if d]
            bounds[current][m.group(1)] = math.prod(dims)
        elif line.startswith("{"):
            current = None

# Registers and static shared memory, from ptxas -v.
resources = {}
current = None
compiling = re.compile(r"Compiling entry function '([^']+)'")
used = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
with open(args.ptxas) as f:
    for line in f:
        m = compiling.search(line)
        if m:
            current = m.group(1)
            continue
        m = used.search(line)
        if m and current:
            resources[current] = (int(m.group(1)), int(m.group(2) or 0))
            current = None

launches, refused, missing = 0, [], []
kernels = set()
with open(args.log) as f:
    for line in f:
        parts = line.split()
        if len(parts) != 4 or parts[0] != "launch":
            sys.exit(f"launch_limits.py: unexpected log line: {line.strip()}")
        name, threads, dynamic = parts[1], int(parts[2]), int(parts[3])
        launches += 1
        kernels.add(name)
        if name not in bounds or name not in resources:
            missing.append(name)
            continue
        regs, static = resources[name]
        b = bounds[name]
        if "reqntid" in b and threads != b["reqntid"]:
            refused.append((name, f"{threads} threads, .reqntid {b['reqntid']}"))
        if "maxntid" in b and threads > b["maxntid"]:
            refused.append((name, f"{threads} threads, .maxntid {b['maxntid']}"))
        per_warp = math.ceil(regs * 32 / REGISTER_UNIT) * REGISTER_UNIT
        if math.ceil(threads / 32) * per_warp > REGISTERS_PER_SM:
            refused.append((name, f"{threads} threads of {regs} registers "
                                  f"exceed {REGISTERS_PER_SM} registers"))
        if static + dynamic > args.max_shared:
            refused.append((name, f"{static} + {dynamic} bytes of shared "
                                  f"memory exceed {args.max_shared}"))

print(f"launches: {launches}, kernels: {len(kernels)}, refused: {len(refused)}")
for name, why in refused:
    print(f"refused: {name}: {why}")
for name in missing:
    print(f"not compiled by nvcc (or unnamed in the log): {name}")
sys.exit(1 if refused or missing or launches == 0 else 0)
