#!/usr/bin/env python3
"""Runs the documented error messages of docs/errors.md and checks their text.

  check-errors.py DOCS/errors.md MODC MODRUN

Every table row of a section in SECTIONS below must have a case in CASES,
keyed by the row's first cell exactly as the page writes it, and every case
must match a row: a row added to or reworded in those sections without a case
fails this test. Each case runs a command and requires its exit status, a
line of stderr equal to the expected message, and stderr ending in a newline
(docs/errors.md: every message ends with one). No case needs a GPU.
"""
import os
import re
import subprocess
import sys
import tempfile

# The sections whose every row has a runnable case (docs/testing.md).
SECTIONS = [
    "modc: the command line",
    "modrun: the command line (exit status 2)",
]

MODEL = ('{"name": "m", "vocab_size": 16, "d_model": 8, "n_layers": 1, '
         '"n_heads": 2, "d_ff": 16, "seq_len": 8}')

# Row -> cases: (arguments, exit status, expected stderr line). "{modc}",
# "{modrun}" and "{tmp}" are replaced; arguments are split on spaces.
P = "{tmp}/pkg"  # need not exist: usage errors come first
CASES = {
    # modc: the command line
    "`missing command; try 'modc compile --help'`": [
        ("{modc}", 1, "modc: error: missing command; try 'modc compile --help'")],
    "`Unknown subcommand 'X'.`": [
        ("{modc} frob", 1, re.compile(
            r"modc: Unknown subcommand 'frob'\.  Try: '\S*modc --help'"))],
    "`Not enough positional command line arguments specified!`": [
        ("{modc} compile", 1,
         "modc: Not enough positional command line arguments specified!")],
    "`missing -o PKG (the package directory to write)`": [
        ("{modc} compile {tmp}/m.json", 1,
         "modc: error: missing -o PKG (the package directory to write)")],
    "`--target must be cpu or cuda, got 'X'`": [
        ("{modc} compile {tmp}/m.json --target tpu -o {tmp}/o", 1,
         "modc: error: --target must be cpu or cuda, got 'tpu'")],
    "`--arch must be sm_90a or sm_80, got 'X'`": [
        ("{modc} compile {tmp}/m.json --target cuda --arch sm_70 -o {tmp}/o", 1,
         "modc: error: --arch must be sm_90a or sm_80, got 'sm_70'")],
    "`--arch is for --target cuda; the CPU target takes --march`": [
        ("{modc} compile {tmp}/m.json --arch sm_80 -o {tmp}/o", 1,
         "modc: error: --arch is for --target cuda; the CPU target takes --march")],
    "`CUDA compiler 'X' not found (install the CUDA Toolkit, or set --nvcc or the NVCC environment variable)`": [
        ("{modc} compile {tmp}/m.json --target cuda --nvcc {tmp}/no-nvcc -o {tmp}/o",
         1, "modc: error: CUDA compiler '{tmp}/no-nvcc' not found (install the "
         "CUDA Toolkit, or set --nvcc or the NVCC environment variable)")],
    "`compiling the generated CUDA failed (...)`": [
        ("{modc} compile {tmp}/m.json --target cuda --nvcc /bin/false -o {tmp}/o",
         1, re.compile(r"modc: error: compiling the generated CUDA failed \(.*"))],
    "`for the --emit option: Cannot find option named 'X'!`": [
        ("{modc} compile {tmp}/m.json --emit=llvm", 1,
         "modc: for the --emit option: Cannot find option named 'llvm'!")],
    "`cannot open input file 'FILE': No such file or directory`": [
        ("{modc} compile {tmp}/none.json -o {tmp}/o", 1,
         "modc: error: cannot open input file '{tmp}/none.json': No such file "
         "or directory")],

    # modrun: the command line (exit status 2)
    "`unknown command 'X'`": [
        ("{modrun} frob", 2, "modrun: unknown command 'frob'")],
    "`missing package directory PKG`": [
        ("{modrun} info", 2, "modrun: missing package directory PKG")],
    "`missing input FILE (one or more text files)`": [
        ("{modrun} tokenize --seq-len 4 --out {tmp}/t", 2,
         "modrun: missing input FILE (one or more text files)")],
    "`missing safetensors FILE`": [
        ("{modrun} show", 2, "modrun: missing safetensors FILE")],
    "`missing --K`": [
        ("{modrun} init " + P + " --seed 1", 2, "modrun: missing --out")],
    "`option --K needs a value`": [
        ("{modrun} init " + P + " --seed", 2, "modrun: option --seed needs a value")],
    "`unknown option --K`": [
        ("{modrun} info " + P + " --bogus 1", 2, "modrun: unknown option --bogus")],
    "`option --K given twice`": [
        ("{modrun} init " + P + " --seed 1 --seed 2 --out {tmp}/w", 2,
         "modrun: option --seed given twice")],
    "`unexpected argument 'X'`": [
        ("{modrun} info " + P + " extra", 2, "modrun: unexpected argument 'extra'")],
    "`--seed must be a non-negative integer, got 'X'` (also `below 2^64`)": [
        ("{modrun} init " + P + " --seed -1 --out {tmp}/w", 2,
         "modrun: --seed must be a non-negative integer, got '-1'"),
        ("{modrun} init " + P + " --seed 99999999999999999999 --out {tmp}/w", 2,
         "modrun: --seed must be a non-negative integer below 2^64, got "
         "'99999999999999999999'")],
    "`--seq-len must be a positive integer, got 'X'`, `--batch must be a positive integer, ...`": [
        ("{modrun} tokenize {tmp}/m.json --seq-len 0 --out {tmp}/t", 2,
         "modrun: --seq-len must be a positive integer, got '0'"),
        ("{modrun} tokenize {tmp}/m.json --seq-len 4 --batch 0 --out {tmp}/t", 2,
         "modrun: --batch must be a positive integer, got '0'")],
    "`--offset must be a non-negative integer, got 'X'`": [
        ("{modrun} tokenize {tmp}/m.json --seq-len 4 --offset x --out {tmp}/t",
         2, "modrun: --offset must be a non-negative integer below 2^64, got 'x'"),
        ("{modrun} tokenize {tmp}/m.json --seq-len 4 --offset -1 --out {tmp}/t",
         2, "modrun: --offset must be a non-negative integer, got '-1'")],
    "`--K must be an integer in [A, B], got 'X'`": [
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --lr 1 "
         "--seed 1 --steps 2 --batch 1048577", 2,
         "modrun: --batch must be an integer in [1, 1048576], got '1048577'"),
        ("{modrun} sample " + P + " --weights w --prompt a --max-new 2147483648",
         2, "modrun: --max-new must be an integer in [0, 2147483647], got "
         "'2147483648'")],
    "`--batch B times --seq-len S is too large`": [
        ("{modrun} tokenize {tmp}/m.json --seq-len 4294967296 --batch 4294967296 "
         "--out {tmp}/t", 2,
         "modrun: --batch 4294967296 times --seq-len 4294967296 is too large")],
    "`--mode must be topk or causal, got 'X'`": [
        ("{modrun} forward " + P + " --weights w --tokens t --out {tmp}/o "
         "--mode beam", 2, "modrun: --mode must be topk or causal, got 'beam'")],
    "`missing --data FILE...`": [
        ("{modrun} train " + P + " --out {tmp}/c --steps 1 --batch 1 --lr 1", 2,
         "modrun: missing --data FILE...")],
    "`missing --prompt, --prompt-file or --batch-file` / `give one of --prompt, --prompt-file and --batch-file`": [
        ("{modrun} sample " + P + " --weights w --max-new 1", 2,
         "modrun: missing --prompt, --prompt-file or --batch-file"),
        ("{modrun} sample " + P + " --weights w --max-new 1 --prompt a "
         "--prompt-file f", 2,
         "modrun: give one of --prompt, --prompt-file and --batch-file")],
    "`--max-new must be a non-negative integer, got 'X'` / `--top-k must be a non-negative integer, ...`": [
        ("{modrun} sample " + P + " --weights w --prompt a --max-new -3", 2,
         "modrun: --max-new must be a non-negative integer, got '-3'"),
        ("{modrun} sample " + P + " --weights w --prompt a --max-new 1 "
         "--top-k -1", 2, "modrun: --top-k must be a non-negative integer, got '-1'")],
    "`--temperature must be a number >= 0, got 'X'`": [
        ("{modrun} sample " + P + " --weights w --prompt a --max-new 1 "
         "--temperature -1", 2,
         "modrun: --temperature must be a number >= 0, got '-1'")],
    "`--top-p must be a number > 0, got 'X'` / `--top-p must be in (0, 1], got 'X'`": [
        ("{modrun} sample " + P + " --weights w --prompt a --max-new 1 --top-p 0",
         2, "modrun: --top-p must be a number > 0, got '0'"),
        ("{modrun} sample " + P + " --weights w --prompt a --max-new 1 "
         "--top-p 1.5", 2, "modrun: --top-p must be in (0, 1], got '1.5'")],
    "`missing --seed (or --weights) to initialise the weights`": [
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 1 "
         "--batch 1 --lr 1", 2,
         "modrun: missing --seed (or --weights) to initialise the weights")],
    "`--resume and --weights exclude each other (a checkpoint holds its weights)`": [
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --resume r "
         "--weights w", 2, "modrun: --resume and --weights exclude each other "
         "(a checkpoint holds its weights)")],
    "`--lr must be a number > 0, got 'X'`, `--weight-decay must be a number >= 0, ...`, `--clip must be a number >= 0, ...`": [
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 1 "
         "--batch 1 --seed 1 --lr 0", 2, "modrun: --lr must be a number > 0, got '0'"),
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 1 "
         "--batch 1 --seed 1 --lr 1 --weight-decay -1", 2,
         "modrun: --weight-decay must be a number >= 0, got '-1'"),
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 1 "
         "--batch 1 --seed 1 --lr 1 --clip nan", 2,
         "modrun: --clip must be a number >= 0, got 'nan'")],
    "`--steps must be a positive integer, got 'X'` (also `--batch`, `--eval-every`, `--save-every`, `--stop-after`); `--warmup must be a non-negative integer, ...`": [
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 0 "
         "--batch 1 --seed 1 --lr 1", 2,
         "modrun: --steps must be a positive integer, got '0'"),
        ("{modrun} train " + P + " --data {tmp}/m.json --out {tmp}/c --steps 1 "
         "--batch 1 --seed 1 --lr 1 --warmup -1", 2,
         "modrun: --warmup must be a non-negative integer, got '-1'")],
}


def documented_rows(path):
    """{section: [first cell of each table row]} of docs/errors.md."""
    rows, section = {}, None
    for line in open(path, encoding="utf-8"):
        if line.startswith("## "):
            section = line[3:].strip()
            rows[section] = []
        elif section and line.startswith("| ") and not line.startswith(
                "| message |"):
            # The first cell ends at the first " | " outside backticks.
            cell, ticks = "", False
            for i, ch in enumerate(line[2:]):
                if ch == "`":
                    ticks = not ticks
                if not ticks and line[2 + i:].startswith(" | "):
                    break
                cell += ch
            rows[section].append(cell)
    return rows


def main():
    doc, modc, modrun = sys.argv[1:4]
    failures = []
    rows = documented_rows(doc)
    wanted = []
    for s in SECTIONS:
        if s not in rows:
            failures.append("docs/errors.md has no section '%s'" % s)
            continue
        wanted += rows[s]
    for r in wanted:
        if r not in CASES:
            failures.append("no case for the documented error %s" % r)
    for key in CASES:
        if key not in wanted:
            failures.append("case %s matches no row of the sections tested "
                            "(reworded or removed?)" % key)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "m.json"), "w") as f:
            f.write(MODEL)
        ran = 0
        for key, cases in CASES.items():
            for args, status, expected in cases:
                sub = lambda s: s.replace("{modc}", modc).replace(
                    "{modrun}", modrun).replace("{tmp}", tmp)
                argv = [sub(a) for a in args.split(" ")]
                p = subprocess.run(argv, capture_output=True, text=True,
                                   cwd=tmp, timeout=120)
                ran += 1
                lines = p.stderr.split("\n")
                if isinstance(expected, str):
                    found = sub(expected) in lines
                else:
                    found = any(expected.fullmatch(l) for l in lines)
                what = "%s: `%s`" % (key, " ".join(argv))
                if p.returncode != status:
                    failures.append("%s: exit status %d, expected %d" %
                                    (what, p.returncode, status))
                if not found:
                    failures.append("%s: no stderr line %r in:\n%s" %
                                    (what, expected if isinstance(expected, str)
                                     else expected.pattern, p.stderr))
                if not p.stderr.endswith("\n"):
                    failures.append("%s: stderr does not end with a newline: "
                                    "%r" % (what, p.stderr[-80:]))
    for f in failures:
        print("FAIL:", f)
    print("%d documented errors in %d sections, %d commands run, %d failures"
          % (len(wanted), len(SECTIONS), ran, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
