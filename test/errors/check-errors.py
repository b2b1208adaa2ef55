#!/usr/bin/env python3
"""Runs the documented error messages of docs/errors.md and checks their text.

  check-errors.py DOCS/errors.md MODC MODRUN

Every table row of docs/errors.md must have a case in CASES or a reason in
NOT_RUNNABLE, keyed by the row's first cell exactly as the page writes it,
and every key must match a row: a row added to or reworded on the page
without a case fails this test, so the page and the test cannot drift. Each
case runs a command and requires its exit status, a line of stderr equal to
the expected message, and stderr ending in a newline (docs/errors.md: every
message ends with one). No case needs a GPU: the fixtures (three tiny
packages, weights, token files, a checkpoint, damaged copies of them and
stand-in libmodel.so files built with the C compiler modc uses) are made in a
temporary directory at each run.
"""
import array
import json
import os
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

MODEL = ('{"name": "m", "vocab_size": 16, "d_model": 8, "n_layers": 1, '
         '"n_heads": 2, "d_ff": 16, "seq_len": 8}')

# The packages the runtime cases use (compiled once per run, in parallel):
# A decodes (predictor router), B has a vocabulary below 256 (byte text does
# not fit it), C routes with causal_router none (no causal mode, no decode).
PACKAGES = {
    "pa": '{"name": "a", "vocab_size": 256, "d_model": 8, "n_layers": 2, '
          '"n_heads": 2, "d_ff": 16, "seq_len": 8, "mod": {"capacity": 0.5, '
          '"causal_router": "predictor"}}',
    "pb": '{"name": "b", "vocab_size": 16, "d_model": 8, "n_layers": 1, '
          '"n_heads": 2, "d_ff": 16, "seq_len": 8}',
    "pc": '{"name": "c", "vocab_size": 256, "d_model": 8, "n_layers": 2, '
          '"n_heads": 2, "d_ff": 16, "seq_len": 8, "mod": {"capacity": 0.5, '
          '"causal_router": "none"}}',
}

# A valid model description for the modc cases to break one key at a time.
BASE = ('"name": "m", "vocab_size": 16, "d_model": 8, "n_layers": 2, '
        '"n_heads": 2, "d_ff": 16, "seq_len": 8')

P = "{tmp}/pkg"  # need not exist: usage errors come first
# A data-parallel training run, and mpirun over loopback only
# (docs/distributed.md); cases that name mpirun are skipped without it.
DP = ("{modrun} train {tmp}/pa --data {tmp}/data.txt --steps 2 --batch 2 "
      "--lr 0.01 --seed 1 --out {tmp}/dp.st")
MPIRUN = "mpirun --oversubscribe"
MPIENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
          "OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo",
          "OMPI_MCA_oob_tcp_if_include": "lo", "OMP_NUM_THREADS": "1"}
# modc --cuda-gemms cases stop at --emit=modk: no nvcc needed.
CUDA_GEMMS = "{modc} compile {tmp}/m.json --target cuda --emit=modk --cuda-gemms="
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
    "`--no-fuse takes routing, residual, residual-add, activation, rows-epilogue, router-norm, select-gather, horizontal, copy, group, siblings and zero-fill, got 'X'`": [
        ("{modc} compile {tmp}/m.json --no-fuse=routing,rope -o {tmp}/o",
         1, "modc: error: --no-fuse takes routing, residual, residual-add, "
         "activation, rows-epilogue, router-norm, select-gather, horizontal, "
         "copy, group, siblings and zero-fill, got 'rope'")],
    "`--arch is for --target cuda; the CPU target takes --march`": [
        ("{modc} compile {tmp}/m.json --arch sm_80 -o {tmp}/o", 1,
         "modc: error: --arch is for --target cuda; the CPU target takes --march")],
    "`--jobs is for --target cuda (nvcc's threads)`": [
        ("{modc} compile {tmp}/m.json --jobs 2 -o {tmp}/o", 1,
         "modc: error: --jobs is for --target cuda (nvcc's threads)")],
    "`--kernel-cache and --no-kernel-cache are for --target cuda (CUTLASS kernels)`": [
        ("{modc} compile {tmp}/m.json --no-kernel-cache -o {tmp}/o", 1,
         "modc: error: --kernel-cache and --no-kernel-cache are for --target "
         "cuda (CUTLASS kernels)")],
    "`give --kernel-cache DIR or --no-kernel-cache, not both`": [
        ("{modc} compile {tmp}/m.json --target cuda --kernel-cache {tmp}/kc "
         "--no-kernel-cache -o {tmp}/o", 1,
         "modc: error: give --kernel-cache DIR or --no-kernel-cache, not both")],
    "`--cuda-gemms is for --target cuda`": [
        ("{modc} compile {tmp}/m.json --cuda-gemms=path=mma -o {tmp}/o", 1,
         "modc: error: --cuda-gemms is for --target cuda")],
    "`--cuda-gemms takes no arch=; use --arch`": [
        (CUDA_GEMMS + "arch=sm_80", 1,
         "modc: error: --cuda-gemms takes no arch=; use --arch")],
    "`bad --cuda-gemms 'X': modk-configure-gemms: <Pass-Options-Parser>: no such option Y`": [
        (CUDA_GEMMS + "tiles=large", 1,
         "modc: error: bad --cuda-gemms 'tiles=large': modk-configure-gemms: "
         "<Pass-Options-Parser>: no such option tiles")],
    "`error: modk-configure-gemms: path 'X'; expected auto, simt, mma or wgmma` / `error: modk-configure-gemms: tile 'X'; expected auto, small or large`": [
        (CUDA_GEMMS + "path=tensor", 1,
         "error: modk-configure-gemms: path 'tensor'; expected auto, simt, mma "
         "or wgmma"),
        (CUDA_GEMMS + "tile=medium", 1,
         "error: modk-configure-gemms: tile 'medium'; expected auto, small or "
         "large")],
    "`error: modk-configure-gemms: library 'X'; expected tiles or cutlass`": [
        (CUDA_GEMMS + "library=cublas", 1,
         "error: modk-configure-gemms: library 'cublas'; expected tiles or "
         "cutlass")],
    "`error: modk-configure-gemms: sm-count N; expected 0 (auto) or more`": [
        (CUDA_GEMMS + "sm-count=-4", 1,
         "error: modk-configure-gemms: sm-count -4; expected 0 (auto) or more"),
        (CUDA_GEMMS + "wgrad-chunk-rows=-1", 1,
         "error: modk-configure-gemms: wgrad-chunk-rows -1; expected 0 (auto) "
         "or more")],
    "`error: modk-configure-gemms: sm_80 has no wgmma`": [
        (CUDA_GEMMS + "path=wgmma --arch sm_80", 1,
         "error: modk-configure-gemms: sm_80 has no wgmma")],
    # A cache under a file: the warning, then nvcc (/bin/false) fails.
    "`warning: cannot use the kernel cache DIR (REASON); compiling the CUTLASS kernels without it` / `warning: cannot store a kernel in the kernel cache DIR (REASON)`": [
        ("{modc} compile {tmp}/mcutlass.json --target cuda --cuda-gemms=cutlass "
         "--nvcc /bin/false --kernel-cache {tmp}/m.json/cache -o {tmp}/o", 1,
         "modc: warning: cannot use the kernel cache {tmp}/m.json/cache (Not a "
         "directory); compiling the CUTLASS kernels without it")],
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
    "`--tokenizer: MODEL.json: the tokenizer TOKENIZER has N tokens (ids up to M), more than the model's vocab_size V` (or any other `--tokenizer: TOKENIZER: ...` message of [modrun's tokenizers](#modrun-tokenizers---tokenizer-or-the-one-a-package-names))": [
        ("{modc} compile {tmp}/m.json --tokenizer {tmp}/tj.json -o {tmp}/o", 1,
         "modc: error: --tokenizer: {tmp}/m.json: the tokenizer {tmp}/tj.json "
         "has 300 tokens (ids up to 299), more than the model's vocab_size "
         "16"),
        ("{modc} compile {tmp}/m.json --tokenizer {tmp}/none.json -o {tmp}/o",
         1, "modc: error: --tokenizer: {tmp}/none.json: cannot open: No such "
         "file or directory")],
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


def C(msg):
    """A modc error line."""
    return "modc: error: " + msg


def E(msg):
    """A modrun runtime error line (exit status 1)."""
    return "modrun: error: " + msg


def R(pattern):
    """A line to match as a regular expression ({tmp} is replaced)."""
    return re.compile(pattern)


def bad_model(body):
    """Arguments compiling a model description written to a file at setup."""
    name = "bad%d.json" % len(BAD_MODELS)
    BAD_MODELS[name] = body
    return "{modc} compile {tmp}/" + name + " --emit=mlir"


BAD_MODELS = {}
A, B, Cp = "{tmp}/pa", "{tmp}/pb", "{tmp}/pc"
WA, WB = "{tmp}/wa.st", "{tmp}/wb.st"
FWD = "{modrun} forward " + A + " --weights " + WA
TRAIN = "{modrun} train " + A + " --data {tmp}/data.txt --steps 2 --batch 2 --lr 0.01"
SAMPLE = "{modrun} sample " + A + " --weights " + WA
TOK = "{modrun} tokenize --seq-len 4 --out {tmp}/tk.st "
SHOW = "{modrun} show {tmp}/"
KEY = "modc: error: {tmp}/bad\\d+.json: key "
# A case is (arguments, exit status, expected stderr line[, options]);
# options: "env" (added to the environment), "as_limit" (RLIMIT_AS bytes).
# A model whose heads (256) are too wide for sm_80's attention kernels.
WIDE_HEADS = bad_model('{"name": "w", "vocab_size": 16, "d_model": 512, '
                       '"n_layers": 1, "n_heads": 2, "d_ff": 16, '
                       '"seq_len": 8}').replace(
    "--emit=mlir", "--target cuda --arch sm_80 --emit=modk")
CASES.update({
    "`loc(\"FILE\":1:1): error: attention over heads of HD needs N bytes of shared memory a block on the CUDA kernel for head dims above 128, more than a block of ARCH (PART) has (M); the CUDA target takes head dims (d_model / n_heads) up to 288 on sm_90a, 208 on sm_80`": [
        (WIDE_HEADS, 1,
         R(r'loc\(".*/bad\d+\.json":1:1\): error: attention over heads of 256 '
           r"needs 205312 bytes of shared memory a block on the CUDA kernel "
           r"for head dims above 128, more than a block of sm_80 \(A100 SXM\) "
           r"has \(166912\); the CUDA target takes head dims \(d_model / "
           r"n_heads\) up to 288 on sm_90a, 208 on sm_80"))],
    "`lowering FILE failed`": [
        (WIDE_HEADS, 1, R(r"modc: error: lowering .*/bad\d+\.json failed"))],
    # modc: the model description
    "`FILE:LINE:COL: JSON nested deeper than 64 levels (a model description needs 2)`": [
        (bad_model("[" * 70 + "]" * 70), 1, R(
            r"modc: error: {tmp}/bad\d+.json:1:65: JSON nested deeper than 64 "
            r"levels \(a model description needs 2\)"))],
    "`FILE: invalid JSON: [LINE:COL, byte=N]: ...`": [
        (bad_model('{"a": 1,}'), 1, R(
            r"modc: error: {tmp}/bad\d+.json: invalid JSON: \[1:9, byte=9\]: .+"))],
    "`FILE: the model must be a JSON object`": [
        (bad_model("[1]"), 1, R(r"modc: error: {tmp}/bad\d+.json: the model "
                                r"must be a JSON object"))],
    "`FILE: key 'K': given twice (duplicate key)`": [
        (bad_model("{%s, \"name\": \"n\"}" % BASE), 1,
         R(KEY + r"'name': given twice \(duplicate key\)"))],
    "`key 'K': unknown key`": [
        (bad_model("{%s, \"capcity\": 1}" % BASE), 1,
         R(KEY + "'capcity': unknown key"))],
    "`key 'K': missing (an integer is required)`": [
        (bad_model('{"name": "m", "vocab_size": 16}'), 1,
         R(KEY + r"'d_model': missing \(an integer is required\)"))],
    "`key 'K': expected an integer, got X`": [
        (bad_model("{%s, \"d_ff\": 16.5}" % BASE.replace(', "d_ff": 16', "")),
         1, R(KEY + "'d_ff': expected an integer, got .*16.5"))],
    "`key 'K': expected a number, got X` / `key 'K': expected a finite number, got inf`": [
        (bad_model("{%s, \"norm_eps\": \"x\"}" % BASE), 1,
         R(KEY + "'norm_eps': expected a number, got \"x\"")),
        (bad_model("{%s, \"rope_theta\": 1e999}" % BASE), 1,
         R(KEY + "'rope_theta': expected a finite number, got .*inf"))],
    "`key 'K': expected true or false, got X`": [
        (bad_model("{%s, \"tie_embeddings\": \"yes\"}" % BASE), 1,
         R(KEY + "'tie_embeddings': expected true or false, got \"yes\""))],
    "`key 'K': must be >= N, got X`": [
        (bad_model(BASE.replace('"d_ff": 16', '"d_ff": 0').join("{}")), 1,
         R(KEY + "'d_ff': must be >= 1, got 0"))],
    "`key 'K': must be <= N, got X`": [
        (bad_model(BASE.replace('"vocab_size": 16', '"vocab_size": 99999999')
                   .join("{}")), 1,
         R(KEY + "'vocab_size': must be <= 16777216, got 99999999"))],
    "`key 'name': expected a non-empty string`": [
        (bad_model(BASE.replace('"name": "m"', '"name": ""').join("{}")), 1,
         R(KEY + "'name': expected a non-empty string"))],
    "`key 'name': may hold only letters, digits, '-', '_' and '.', got 'X'`": [
        (bad_model(BASE.replace('"name": "m"', '"name": "a b"').join("{}")), 1,
         R(KEY + r"'name': may hold only letters, digits, '-', '_' and '\.', "
           "got 'a b'"))],
    "`key 'n_heads': d_model (D) is not divisible by n_heads (H)`": [
        (bad_model(BASE.replace('"n_heads": 2', '"n_heads": 3').join("{}")), 1,
         R(KEY + r"'n_heads': d_model \(8\) is not divisible by n_heads \(3\)"))],
    "`key 'n_heads': head_dim = d_model / n_heads = X is odd; RoPE needs an even head_dim`": [
        (bad_model(BASE.replace('"d_model": 8', '"d_model": 6').join("{}")), 1,
         R(KEY + "'n_heads': head_dim = d_model / n_heads = 3 is odd; RoPE "
           "needs an even head_dim"))],
    "`key 'n_kv_heads': n_heads (H) is not divisible by n_kv_heads (K)`": [
        (bad_model("{%s, \"n_kv_heads\": 3}" % BASE.replace(
            '"n_heads": 2', '"n_heads": 4')), 1,
         R(KEY + r"'n_kv_heads': n_heads \(4\) is not divisible by "
           r"n_kv_heads \(3\)"))],
    "`key 'K': expected one of A, B, got 'X'`": [
        (bad_model("{%s, \"mlp\": \"relu\"}" % BASE), 1,
         R(KEY + "'mlp': expected one of swiglu, gelu, got 'relu'"))],
    "`key 'norm_eps': must be positive` / `key 'rope_theta': must be positive`": [
        (bad_model("{%s, \"norm_eps\": 0}" % BASE), 1,
         R(KEY + "'norm_eps': must be positive")),
        (bad_model("{%s, \"rope_theta\": -1}" % BASE), 1,
         R(KEY + "'rope_theta': must be positive"))],
    "`key 'mod': expected an object`": [
        (bad_model("{%s, \"mod\": 1}" % BASE), 1,
         R(KEY + "'mod': expected an object"))],
    "`key 'mod.capacity': missing (give capacity in (0, 1] or capacity_tokens)`": [
        (bad_model("{%s, \"mod\": {}}" % BASE), 1,
         R(KEY + r"'mod.capacity': missing \(give capacity in \(0, 1\] or "
           r"capacity_tokens\)"))],
    "`key 'mod.capacity': must be in (0, 1], got X`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 2}}" % BASE), 1,
         R(KEY + r"'mod.capacity': must be in \(0, 1\], got 2"))],
    "`key 'mod.capacity_tokens': give either capacity or capacity_tokens, not both`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"capacity_tokens\": 2}}"
                   % BASE), 1,
         R(KEY + "'mod.capacity_tokens': give either capacity or "
           "capacity_tokens, not both"))],
    "`key 'mod.capacity_tokens': must be in [1, seq_len = S], got X`": [
        (bad_model("{%s, \"mod\": {\"capacity_tokens\": 9}}" % BASE), 1,
         R(KEY + r"'mod.capacity_tokens': must be in \[1, seq_len = 8\], got 9"))],
    "`key 'mod.schedule': layer index I is out of range [0, n_layers = N)`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"schedule\": [5]}}"
                   % BASE), 1,
         R(KEY + r"'mod.schedule': layer index 5 is out of range \[0, "
           r"n_layers = 2\)"))],
    "`key 'mod.schedule': layer index I is listed twice`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"schedule\": [1, 1]}}"
                   % BASE), 1,
         R(KEY + "'mod.schedule': layer index 1 is listed twice"))],
    "`key 'mod.schedule': layer indices must be integers, got X`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"schedule\": [\"a\"]}}"
                   % BASE), 1,
         R(KEY + "'mod.schedule': layer indices must be integers, got \"a\""))],
    "`key 'mod.aux_loss_weight': must be >= 0`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"aux_loss_weight\": -1}}"
                   % BASE), 1,
         R(KEY + "'mod.aux_loss_weight': must be >= 0"))],
    "`key 'mod.predictor_hidden': must be >= 1, got X` / `must be <= 1048576, got X`": [
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"predictor_hidden\": 0}}"
                   % BASE), 1,
         R(KEY + "'mod.predictor_hidden': must be >= 1, got 0")),
        (bad_model("{%s, \"mod\": {\"capacity\": 0.5, \"predictor_hidden\": "
                   "2000000}}" % BASE), 1,
         R(KEY + "'mod.predictor_hidden': must be <= 1048576, got 2000000"))],
    # The moe object (docs/model-format.md section 7).
    "`key 'moe': expected an object`": [
        (bad_model("{%s, \"moe\": 4}" % BASE), 1,
         R(KEY + "'moe': expected an object"))],
    "`key 'moe.n_experts': must be in [1, 1048576], got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 0, \"d_expert\": 8}}"
                   % BASE), 1,
         R(KEY + r"'moe.n_experts': must be in \[1, 1048576\], got 0"))],
    "`key 'moe.noop_experts': must be in [0, 1048576], got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"noop_experts\": -1, "
                   "\"d_expert\": 8}}" % BASE), 1,
         R(KEY + r"'moe.noop_experts': must be in \[0, 1048576\], got -1"))],
    "`key 'moe.d_expert': must be in [1, 1048576], got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 0}}"
                   % BASE), 1,
         R(KEY + r"'moe.d_expert': must be in \[1, 1048576\], got 0"))],
    "`key 'moe.capacity_factor': must be > 0, got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 8, "
                   "\"capacity_factor\": -1}}" % BASE), 1,
         R(KEY + "'moe.capacity_factor': must be > 0, got -1"))],
    "`key 'moe.balance_loss_weight': must be >= 0, got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 8, "
                   "\"balance_loss_weight\": -0.5}}" % BASE), 1,
         R(KEY + "'moe.balance_loss_weight': must be >= 0, got -0.5"))],
    "`key 'moe.schedule': layer index I is out of range [0, n_layers = N)` / `layer index I is listed twice` / `layer indices must be integers, got X`": [
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 8, "
                   "\"schedule\": [2]}}" % BASE), 1,
         R(KEY + r"'moe.schedule': layer index 2 is out of range \[0, "
           r"n_layers = 2\)")),
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 8, "
                   "\"schedule\": [0, 0]}}" % BASE), 1,
         R(KEY + "'moe.schedule': layer index 0 is listed twice")),
        (bad_model("{%s, \"moe\": {\"n_experts\": 2, \"d_expert\": 8, "
                   "\"schedule\": [0.5]}}" % BASE), 1,
         R(KEY + "'moe.schedule': layer indices must be integers, got 0.5"))],

    # modc: .mlir input
    "`cannot parse FILE`": [
        ("{modc} compile {tmp}/bad.mlir -o {tmp}/q", 1,
         C("cannot parse {tmp}/bad.mlir"))],
    "`expected a modk.entry to package`": [
        ("{modc} compile {tmp}/empty.mlir -o {tmp}/q", 1,
         C("expected a modk.entry to package"))],

    # modc: writing the package
    "`PATH exists and is not a directory`": [
        ("{modc} compile {tmp}/m.json -o {tmp}/data.txt", 1,
         C("{tmp}/data.txt exists and is not a directory"))],
    "`PATH exists and is not a modc package; refusing to replace it`": [
        ("{modc} compile {tmp}/m.json -o {tmp}/dir", 1,
         C("{tmp}/dir exists and is not a modc package; refusing to replace it"))],
    "`output directory's parent DIR does not exist`": [
        ("{modc} compile {tmp}/m.json -o {tmp}/nodir/p", 1,
         C("output directory's parent {tmp}/nodir does not exist"))],
    "`cannot create DIR: ...` / `cannot write FILE: ...`": [
        # /proc takes no new directories, even from root.
        ("{modc} compile {tmp}/m.json -o /proc/modc-errors-test", 1,
         R(r"modc: error: cannot create /proc/modc-errors-test\.tmp-\d+: .+"))],
    "`C++ compiler 'X' not found (set --cxx or the CXX environment variable)`": [
        ("{modc} compile {tmp}/m.json --cxx {tmp}/no-cxx -o {tmp}/q", 1,
         C("C++ compiler '{tmp}/no-cxx' not found (set --cxx or the CXX "
           "environment variable)"))],
    "`the C++ compiler 'CXX' rejects --march=ARCH (exit N; modc asks it which CPU features that enables):` followed by its output": [
        ("{modc} compile {tmp}/m.json --march=bogus -o {tmp}/q", 1,
         R(r"modc: error: the C\+\+ compiler '.+' rejects --march=bogus "
           r"\(exit \d+; modc asks it which CPU features that enables\):"))],
    "`compiling the generated C++ failed (exit N):` followed by compiler output": [
        # A compiler that answers the -march query but fails on model.cpp.
        ("{modc} compile {tmp}/m.json --cxx {tmp}/half-cxx -o {tmp}/q", 1,
         R(r"modc: error: compiling the generated C\+\+ failed \(exit 3\):"))],

    # modrun: outputs
    "`--out OUT is the same file as --tokens IN: writing it would destroy that file; choose another --out` (also `--weights`, `--data`, `FILE` for `tokenize`, `PKG/manifest.json` and `PKG/libmodel.so` for `init`, and `--log ... is the same file as --out` for `train`)": [
        (FWD + " --tokens {tmp}/ta.st --out {tmp}/ta.st", 1,
         E("--out {tmp}/ta.st is the same file as --tokens {tmp}/ta.st: writing "
           "it would destroy that file; choose another --out")),
        (FWD + " --tokens {tmp}/ta.st --out {tmp}/./wa.st", 1,
         E("--out {tmp}/./wa.st is the same file as --weights " + WA + ": "
           "writing it would destroy that file; choose another --out")),
        ("{modrun} tokenize {tmp}/data.txt --seq-len 4 --out {tmp}/data.txt", 1,
         E("--out {tmp}/data.txt is the same file as FILE {tmp}/data.txt: "
           "writing it would destroy that file; choose another --out")),
        ("{modrun} init " + A + " --seed 1 --out " + A + "/manifest.json", 1,
         E("--out " + A + "/manifest.json is the same file as PKG/manifest.json "
           + A + "/manifest.json: writing it would destroy that file; choose "
           "another --out")),
        (TRAIN + " --seed 1 --out {tmp}/data.txt", 1,
         E("--out {tmp}/data.txt is the same file as --data {tmp}/data.txt: "
           "writing it would destroy that file; choose another --out")),
        (TRAIN + " --seed 1 --out {tmp}/ck-x.st --log {tmp}/ck-x.st", 1,
         E("--log {tmp}/ck-x.st is the same file as --out {tmp}/ck-x.st: "
           "writing it would destroy that file; choose another --log"))],
    "`--out OUT: directory DIR does not exist` (also `--log`)": [
        (TRAIN + " --seed 1 --out {tmp}/nodir/c.st", 1,
         E("--out {tmp}/nodir/c.st: directory {tmp}/nodir does not exist")),
        (TRAIN + " --seed 1 --out {tmp}/c.st --log {tmp}/nodir/l.csv", 1,
         E("--log {tmp}/nodir/l.csv: directory {tmp}/nodir does not exist"))],

    # modrun: packages
    "`PKG: package directory does not exist`": [
        ("{modrun} info {tmp}/nopkg", 1,
         E("{tmp}/nopkg: package directory does not exist"))],
    "`PKG: not a modc package: not a directory (a package is the directory modc compile writes)`": [
        ("{modrun} info {tmp}/m.json", 1,
         E("{tmp}/m.json: not a modc package: not a directory (a package is "
           "the directory modc compile writes)"))],
    "`PKG: not a modc package: no manifest.json` / `no libmodel.so`": [
        ("{modrun} info {tmp}/dir", 1,
         E("{tmp}/dir: not a modc package: no manifest.json")),
        ("{modrun} info {tmp}/k-nolib", 1,
         E("{tmp}/k-nolib: not a modc package: no libmodel.so"))],
    "`PKG/manifest.json: manifest is not valid JSON: ...`": [
        ("{modrun} info {tmp}/k-json", 1,
         R(r"modrun: error: {tmp}/k-json/manifest.json: manifest is not valid "
           r"JSON: .+"))],
    "`PKG: package ABI N, runtime expects M; recompile the package with this modc`": [
        ("{modrun} info {tmp}/k-abi", 1,
         R(r"modrun: error: {tmp}/k-abi: package ABI 999, runtime expects \d+; "
           r"recompile the package with this modc"))],
    "`PKG: package compiled for --march=ARCH needs CPU features this CPU lacks: F1, F2; recompile it on this machine, or with a portable --march such as x86-64-v3`": [
        ("{modrun} info {tmp}/k-cpu", 1,
         R(r"modrun: error: {tmp}/k-cpu: package compiled for --march=\S+ needs "
           r"CPU features this CPU lacks: \S+; recompile it on this machine, or "
           r"with a portable --march such as x86-64-v3"))],
    "`manifest key 'cpu.features[N]': unknown CPU feature \"F\" ...`": [
        ("{modrun} info {tmp}/k-feat", 1,
         R(r"modrun: error: {tmp}/k-feat/manifest.json: manifest key "
           r"'cpu.features\[\d+\]': unknown CPU feature \"bogus\" .+"))],
    "`PKG: cannot load libmodel.so: the file is truncated (N bytes, but a loadable segment ends at byte M); an interrupted copy? Copy or compile the package again`": [
        ("{modrun} info {tmp}/k-trunc", 1,
         R(r"modrun: error: {tmp}/k-trunc: cannot load libmodel.so: the file is "
           r"truncated \(\d+ bytes, but (a loadable segment|its section "
           r"headers) end(s)? at byte \d+\); an interrupted copy\? Copy or "
           r"compile the package again"))],
    "`PKG: cannot load libmodel.so: ...`": [
        ("{modrun} info {tmp}/k-notelf", 1,
         R(r"modrun: error: {tmp}/k-notelf: cannot load libmodel.so: .+"))],
    "`PKG: not a modc package: libmodel.so does not export SYMBOL`": [
        ("{modrun} info {tmp}/f-noexport", 1,
         E("{tmp}/f-noexport: not a modc package: libmodel.so does not export "
           "modc_forward"))],
    "`PKG: manifest.json does not match the library (edited, or copied from another package)`": [
        ("{modrun} info {tmp}/k-edit", 1,
         E("{tmp}/k-edit: manifest.json does not match the library (edited, or "
           "copied from another package)"))],
    "`PKG: manifest.json does not match the library: the embedded manifest is not valid JSON`": [
        ("{modrun} info {tmp}/f-badjson", 1,
         E("{tmp}/f-badjson: manifest.json does not match the library: the "
           "embedded manifest is not valid JSON"))],
    "`PKG: package target is \"X\"; this runtime runs \"cpu\" and \"cuda\" packages`": [
        ("{modrun} info {tmp}/f-tpu", 1,
         E("{tmp}/f-tpu: package target is \"tpu\"; this runtime runs \"cpu\" "
           "and \"cuda\" packages"))],
    "`PKG/manifest.json: manifest key 'K': ...` (`missing`, `expected an integer, got ...`, `... is out of range [A, B]`, `duplicate param \"X\"`, ...)": [
        ("{modrun} info {tmp}/k-key", 1,
         E("{tmp}/k-key/manifest.json: manifest key 'model.seq_len': missing"))],
    "`PKG/manifest.json: manifest key 'entries.adamw': missing, but entries.grad is present (training needs both)` (or the reverse)": [
        ("{modrun} info {tmp}/k-adamw", 1,
         E("{tmp}/k-adamw/manifest.json: manifest key 'entries.adamw': missing, "
           "but entries.grad is present (training needs both)"))],
    "`PKG: this package has no training entry points (modc_grad, modc_adamw); recompile with this modc`": [
        ("{modrun} grad {tmp}/f-notrain --weights " + WA + " --tokens "
         "{tmp}/tg.st --out {tmp}/g.st", 1,
         E("{tmp}/f-notrain: this package has no training entry points "
           "(modc_grad, modc_adamw); recompile with this modc"))],

    # modrun: weights
    "`W: weights: missing tensor 'NAME' (shape [..]) that the package needs`": [
        (FWD.replace(WA, "{tmp}/ta.st") + " --tokens {tmp}/ta.st --out "
         "{tmp}/o.st", 1, R(r"modrun: error: {tmp}/ta.st: weights: missing "
                            r"tensor '\S+' \(shape \[[0-9, ]+\]\) that the "
                            r"package needs"))],
    "`W: weights: tensor 'NAME' has shape [..], expected [..]`": [
        (FWD.replace(WA, WB) + " --tokens {tmp}/ta.st --out {tmp}/o.st", 1,
         E("{tmp}/wb.st: weights: tensor 'embed.weight' has shape [16, 8], "
           "expected [256, 8]"))],
    "`W: weights: tensor 'NAME' is I32, expected F32`": [
        (FWD.replace(WA, "{tmp}/w-i32.st") + " --tokens {tmp}/ta.st --out "
         "{tmp}/o.st", 1,
         E("{tmp}/w-i32.st: weights: tensor 'embed.weight' is I32, expected F32"))],
    "`W: weights: tensor 'NAME' is not a parameter of this package (model \"M\")`": [
        (FWD.replace(WA, "{tmp}/w-extra.st") + " --tokens {tmp}/ta.st --out "
         "{tmp}/o.st", 1,
         E("{tmp}/w-extra.st: weights: tensor 'tokens' is not a parameter of "
           "this package (model \"a\")"))],

    # modrun: tokens (forward)
    "`T: no tensor 'tokens' (expected I32 [B, S])`": [
        (FWD + " --tokens " + WB + " --out {tmp}/o.st", 1,
         E("{tmp}/wb.st: no tensor 'tokens' (expected I32 [B, 8])"))],
    "`T: tensor 'tokens' must be I32 [B, seq_len] = [B, S] with B >= 1, got DTYPE [..]`": [
        (FWD + " --tokens {tmp}/tg.st --out {tmp}/o.st", 1,
         E("{tmp}/tg.st: tensor 'tokens' must be I32 [B, seq_len] = [B, 8] with "
           "B >= 1, got I32 [2, 9]"))],
    "`T: forward: token X at batch row B, position P is out of range [0, V)`": [
        (FWD + " --tokens {tmp}/t-300.st --out {tmp}/o.st", 1,
         E("{tmp}/t-300.st: forward: token 300 at batch row 1, position 3 is "
           "out of range [0, 256)"))],
    "`T: causal mode needs mod.causal_router aux_loss or predictor; this model has none`": [
        ("{modrun} forward " + Cp + " --weights {tmp}/wc.st --tokens "
         "{tmp}/ta.st --out {tmp}/o.st --mode causal", 1,
         E("{tmp}/ta.st: causal mode needs mod.causal_router aux_loss or "
           "predictor; this model has none"))],
    "`T: forward: batch B is too large` / `T: forward: out of memory for batch B (N bytes of workspace, M logits)`": [
        # Address space capped: the tokens load, their logits do not fit.
        (FWD + " --tokens {tmp}/t-big.st --out {tmp}/o.st", 1,
         R(r"modrun: error: {tmp}/t-big.st: forward: out of memory for batch "
           r"200000 \(\d+ bytes of workspace, 409600000 logits\)"),
         {"as_limit": 1 << 30})],
    "`T: PKG: forward failed (status N): MESSAGE`": [
        # A stand-in library whose modc_forward refuses every call.
        ("{modrun} forward {tmp}/f-real --weights " + WA + " --tokens "
         "{tmp}/ta.st --out {tmp}/o.st", 1,
         E("{tmp}/ta.st: {tmp}/f-real: forward failed (status 1): stand-in: "
           "refused"),
         {"env": {"FAKE_FAIL": "forward"}})],

    # modrun: grad
    "`T: no tensor 'tokens' (expected I32 [B, seq_len + 1] = [B, S+1])`": [
        ("{modrun} grad " + A + " --weights " + WA + " --tokens " + WB +
         " --out {tmp}/g.st", 1,
         E("{tmp}/wb.st: no tensor 'tokens' (expected I32 [B, seq_len + 1] = "
           "[B, 9])"))],
    "`T: tensor 'tokens' must be I32 [B, seq_len + 1] = [B, S+1] with B >= 1 (inputs t[:, :S], targets t[:, 1:]), got DTYPE [..]`": [
        ("{modrun} grad " + A + " --weights " + WA + " --tokens {tmp}/ta.st "
         "--out {tmp}/g.st", 1,
         E("{tmp}/ta.st: tensor 'tokens' must be I32 [B, seq_len + 1] = [B, 9] "
           "with B >= 1 (inputs t[:, :8], targets t[:, 1:]), got I32 [2, 8]"))],
    "`T: grad: token X at batch row B, position P is out of range [0, V)`": [
        ("{modrun} grad " + B + " --weights " + WB + " --tokens {tmp}/tg.st "
         "--out {tmp}/g.st", 1,
         R(r"modrun: error: {tmp}/tg.st: grad: token \d+ at batch row 0, "
           r"position 0 is out of range \[0, 16\)"))],
    "`T: grad: batch B is too large` / `T: grad: out of memory for batch B (N bytes of workspace)`": [
        ("{modrun} grad " + A + " --weights " + WA + " --tokens "
         "{tmp}/tg-big.st --out {tmp}/g.st", 1,
         R(r"modrun: error: {tmp}/tg-big.st: grad: out of memory for batch "
           r"100000 \(\d+ bytes of workspace\)"), {"as_limit": 1 << 30})],
    "`T: PKG: grad failed (status N): MESSAGE` / `PKG: adamw failed (status N): MESSAGE`": [
        ("{modrun} grad {tmp}/f-real --weights " + WA + " --tokens {tmp}/tg.st "
         "--out {tmp}/g.st", 1,
         E("{tmp}/tg.st: {tmp}/f-real: grad failed (status 1): stand-in: "
           "refused"),
         {"env": {"FAKE_FAIL": "grad"}}),
        (TRAIN.replace(A, "{tmp}/f-real") + " --seed 1 --out {tmp}/c.st", 1,
         E("{tmp}/f-real: adamw failed (status 1): stand-in: refused"),
         {"env": {"FAKE_FAIL": "adamw"}})],

    # modrun: train
    "`PKG: modrun train reads byte-level text (tokens 0..255), but the model's vocab_size is V`": [
        (TRAIN.replace(A, B) + " --seed 1 --out {tmp}/c.st", 1,
         E("{tmp}/pb: modrun train reads byte-level text (tokens 0..255), but "
           "the model's vocab_size is 16"))],
    "`FILE: no such file`, `FILE: is a directory, not a text file`, `FILE: cannot open: ...`, `FILE: read failed after N bytes: ...`": [
        (TRAIN.replace("{tmp}/data.txt", "{tmp}/none.txt") + " --seed 1 --out "
         "{tmp}/c.st", 1, E("{tmp}/none.txt: no such file")),
        (TRAIN.replace("{tmp}/data.txt", "{tmp}/dir") + " --seed 1 --out "
         "{tmp}/c.st", 1, E("{tmp}/dir: is a directory, not a text file"))],
    "`FILE: not a regular file (a device or a pipe, which may never end); give a text file`": [
        (TRAIN.replace("{tmp}/data.txt", "/dev/zero") + " --seed 1 --out "
         "{tmp}/c.st", 1, E("/dev/zero: not a regular file (a device or a pipe, "
                            "which may never end); give a text file")),
        # The same row in the tokenize section.
        (TOK + "/dev/zero", 1, E("/dev/zero: not a regular file (a device or a "
                                 "pipe, which may never end); give a text file"))],
    "`FILE: file is empty (no bytes to train on)`": [
        (TRAIN.replace("{tmp}/data.txt", "{tmp}/empty.txt") + " --seed 1 --out "
         "{tmp}/c.st", 1, E("{tmp}/empty.txt: file is empty (no bytes to train "
                            "on)"))],
    "`DATA: N bytes; the held-out split (the last 10%) needs at least one batch of B x (seq_len S + 1) = X bytes`": [
        (TRAIN.replace("{tmp}/data.txt", "{tmp}/short.txt") + " --seed 1 --out "
         "{tmp}/c.st", 1, E("{tmp}/short.txt: 10 bytes; the held-out split (the "
                            "last 10%) needs at least one batch of 2 x (seq_len "
                            "8 + 1) = 18 bytes"))],
    "`DATA: N bytes; after holding out the last H bytes the training split has T bytes, less than one batch of B x (seq_len S + 1) = X bytes (need at least 2X bytes in all)`": [
        (TRAIN.replace("{tmp}/data.txt", "{tmp}/mid.txt {tmp}/mid.txt") +
         " --seed 1 --out {tmp}/c.st", 1,
         E("the 2 data files: 30 bytes; after holding out the last 18 bytes the "
           "training split has 12 bytes, less than one batch of 2 x (seq_len 8 "
           "+ 1) = 18 bytes (need at least 36 bytes in all)"))],
    "`step N: loss is not finite (total nan, ce nan, aux X); training stopped, the last good checkpoint is CKPT (step K)`": [
        # A huge learning rate: step 1 is finite and saved, step 2 is not.
        ("{modrun} train " + A + " --data {tmp}/data.txt --steps 3 --batch 2 "
         "--lr 1e30 --seed 1 --save-every 1 --warmup 0 --clip 0 --out "
         "{tmp}/c-nan.st", 1,
         R(r"modrun: error: step 2: loss is not finite \(total -?nan, ce -?nan, "
           r"aux \S+\); training stopped, the last good checkpoint is "
           r"{tmp}/c-nan.st \(step 1\)"))],
    "`step N: gradient norm is not finite (inf; loss ...); training stopped, ...`": [
        # Embeddings scaled by 1e19: finite logits and loss, gradients past
        # the float range.
        (TRAIN + " --weights {tmp}/w-huge.st --out {tmp}/c-inf.st", 1,
         R(r"modrun: error: step 1: gradient norm is not finite \((inf|-?nan); loss "
           r"total .+\); training stopped, .+"))],
    "`...; training stopped, no checkpoint was written in this run (the first was due at step K); CKPT is unchanged`": [
        (TRAIN + " --weights {tmp}/w-nan.st --out {tmp}/c-un.st", 1,
         R(r"modrun: error: step 1: loss is not finite .*; training stopped, "
           r"no checkpoint was written in this run \(the first was due at step "
           r"2\); {tmp}/c-un.st is unchanged"))],
    "`LOG: cannot open log for writing: ...` / `LOG: write failed: ...`": [
        (TRAIN + " --seed 1 --out {tmp}/c.st --log {tmp}/dir", 1,
         E("{tmp}/dir: cannot open log for writing: Is a directory")),
        (TRAIN + " --seed 1 --out {tmp}/c.st --log /dev/full", 1,
         E("/dev/full: write failed: No space left on device"))],

    # modrun: sample and eval
    "`PKG: routed layers with causal_router none cannot decode; compile with aux_loss or predictor`": [
        ("{modrun} sample " + Cp + " --weights {tmp}/wc.st --prompt a "
         "--max-new 1", 1,
         E("{tmp}/pc: routed layers with causal_router none cannot decode; "
           "compile with aux_loss or predictor"))],
    "`PKG: this package has no decode entry point (modc_decode); recompile it with this modc`": [
        ("{modrun} sample {tmp}/f-nodecode --weights " + WA + " --prompt a "
         "--max-new 1", 1,
         E("{tmp}/f-nodecode: this package has no decode entry point "
           "(modc_decode); recompile it with this modc"))],
    "`PKG/manifest.json: manifest key 'entries.decode': present, but routed layers with causal_router \"none\" cannot decode`": [
        ("{modrun} info {tmp}/k-decode", 1,
         E("{tmp}/k-decode/manifest.json: manifest key 'entries.decode': "
           "present, but routed layers with causal_router \"none\" cannot "
           "decode"))],
    "`--prompt is empty; generation needs at least one byte to start from` (also `F line N is empty`, `F is empty`, `F: file is empty (one prompt per line)`)": [
        (["{modrun}", "sample", A, "--weights", WA, "--prompt", "",
          "--max-new", "1"], 1,
         E("--prompt is empty; generation needs at least one byte to start "
           "from")),
        (SAMPLE + " --batch-file {tmp}/gap.txt --max-new 1", 1,
         E("{tmp}/gap.txt line 2 is empty; generation needs at least one byte "
           "to start from")),
        (SAMPLE + " --prompt-file {tmp}/empty.txt --max-new 1", 1,
         E("{tmp}/empty.txt is empty; generation needs at least one byte to "
           "start from")),
        (SAMPLE + " --batch-file {tmp}/empty.txt --max-new 1", 1,
         E("{tmp}/empty.txt: file is empty (one prompt per line)"))],
    "`--prompt is N bytes, longer than the model's context of S tokens (seq_len)`": [
        (SAMPLE + " --prompt abcdefghij --max-new 1", 1,
         E("--prompt is 10 bytes, longer than the model's context of 8 tokens "
           "(seq_len)"))],
    "`--prompt is N bytes and fills the model's context of S tokens (seq_len): no room to generate; use at most S-1 bytes`": [
        (SAMPLE + " --prompt abcdefgh --max-new 1", 1,
         E("--prompt is 8 bytes and fills the model's context of 8 tokens "
           "(seq_len): no room to generate; use at most 7 bytes"))],
    "`PKG: the model's context is 1 token (seq_len 1), which any prompt fills: nothing can be generated; compile the model with seq_len 2 or more`": [
        ("{modrun} sample {tmp}/f-seq1 --weights " + WA + " --prompt a "
         "--max-new 1", 1,
         E("{tmp}/f-seq1: the model's context is 1 token (seq_len 1), which "
           "any prompt fills: nothing can be generated; compile the model "
           "with seq_len 2 or more"))],
    "`--prompt: byte 0xXX at position P is outside the model's vocabulary (vocab_size V, so bytes 0x00..0xYY)`": [
        ("{modrun} sample " + B + " --weights " + WB + " --prompt a "
         "--max-new 1", 1,
         E("--prompt: byte 0x61 at position 0 is outside the model's vocabulary "
           "(vocab_size 16, so bytes 0x00..0x0F)"))],
    "`F: cannot open: ...` / `F: is a directory, not a prompt file`": [
        (SAMPLE + " --prompt-file {tmp}/none.txt --max-new 1", 1,
         E("{tmp}/none.txt: cannot open: No such file or directory")),
        (SAMPLE + " --batch-file {tmp}/dir --max-new 1", 1,
         E("{tmp}/dir: is a directory, not a prompt file"))],
    "`modrun: note: --max-new N clamped to M for LABEL: prompt (L bytes) plus generated bytes must fit the model's context (seq_len S)`": [
        # Not an error: the run goes on and succeeds.
        (SAMPLE + " --prompt abc --max-new 9 --temperature 0", 0,
         "modrun: note: --max-new 9 clamped to 5 for --prompt: prompt (3 bytes) "
         "plus generated bytes must fit the model's context (seq_len 8)")],
    "`sampling: logit of token T is nan; the model produced a non-finite value`": [
        ("{modrun} sample " + A + " --weights {tmp}/w-nan.st --prompt a "
         "--max-new 1", 1,
         R(r"modrun: error: sampling: logit of token \d+ is -?nan; the model "
           r"produced a non-finite value"))],
    "`PKG: modrun eval reads byte-level text (tokens 0..255), but the model's vocab_size is V`": [
        ("{modrun} eval " + B + " --weights " + WB + " --data {tmp}/data.txt",
         1, E("{tmp}/pb: modrun eval reads byte-level text (tokens 0..255), but "
              "the model's vocab_size is 16"))],
    "`DATA: N bytes; the held-out split ...` (and the other corpus messages of `train`)": [
        ("{modrun} eval " + A + " --weights " + WA + " --data {tmp}/short.txt",
         1, E("{tmp}/short.txt: 10 bytes; the held-out split (the last 10%) "
              "needs at least one batch of 8 x (seq_len 8 + 1) = 72 bytes"))],

    # modrun: checkpoints
    "`CKPT: not a modc checkpoint (its __metadata__ has no format \"modc-checkpoint\"; modrun train writes them)`": [
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") + " --resume " +
         WA + " --out {tmp}/c.st", 1,
         E("{tmp}/wa.st: not a modc checkpoint (its __metadata__ has no format "
           "\"modc-checkpoint\"; modrun train writes them)"))],
    "`CKPT: checkpoint is for model \"A\" (manifest hash H1), but package PKG is model \"B\" (manifest hash H2); resume with the package it was trained with`": [
        (TRAIN.replace(A, Cp).replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck.st --out {tmp}/c.st", 1,
         R(r"modrun: error: {tmp}/ck.st: checkpoint is for model \"a\" "
           r"\(manifest hash [0-9a-f]{16}\), but package {tmp}/pc is model "
           r"\"c\" \(manifest hash [0-9a-f]{16}\); resume with the package it "
           r"was trained with"))],
    "`CKPT: checkpoint metadata lacks 'K'` / `CKPT: checkpoint metadata 'K' = \"V\" is not an integer >= 0` (or `a finite number`, `a hexadecimal integer`)": [
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-nostep.st --out {tmp}/c.st", 1,
         E("{tmp}/ck-nostep.st: checkpoint metadata lacks 'step'")),
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-badstep.st --out {tmp}/c.st", 1,
         E("{tmp}/ck-badstep.st: checkpoint metadata 'step' = \"-1\" is not an "
           "integer >= 0")),
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-badlr.st --out {tmp}/c.st", 1,
         E("{tmp}/ck-badlr.st: checkpoint metadata 'lr' = \"x\" is not a "
           "finite number"))],
    "`CKPT: weights: missing tensor 'NAME' ...` / `CKPT: optimizer moment 'adam.m.NAME' is missing, expected F32 [..]` / `CKPT: optimizer moments adam.v.* name tensors that are not parameters of this package`": [
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-now.st --out {tmp}/c.st", 1,
         R(r"modrun: error: {tmp}/ck-now.st: weights: missing tensor "
           r"'embed.weight' .+")),
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-nom.st --out {tmp}/c.st", 1,
         E("{tmp}/ck-nom.st: optimizer moment 'adam.m.embed.weight' is missing, "
           "expected F32 [256, 8]")),
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck-extrav.st --out {tmp}/c.st", 1,
         E("{tmp}/ck-extrav.st: optimizer moments adam.v.* name tensors that "
           "are not parameters of this package"))],
    "`CKPT: checkpoint is at step N, so --steps M leaves nothing to do`": [
        (TRAIN.replace(" --batch 2 --lr 0.01", "") +
         " --resume {tmp}/ck.st --out {tmp}/c.st", 1,
         E("{tmp}/ck.st: checkpoint is at step 2, so --steps 2 leaves nothing "
           "to do"))],
    "`CKPT: data position P is past the end of the training split (T bytes); resume with the data it was trained on`": [
        # ck.st trained 2 steps of 2 x 9 bytes: position 36; 40 bytes hold
        # out 18 and leave 22 to train on.
        (TRAIN.replace(" --steps 2 --batch 2 --lr 0.01", " --steps 4")
         .replace("{tmp}/data.txt", "{tmp}/d40.txt") +
         " --resume {tmp}/ck.st --out {tmp}/c.st", 1,
         E("{tmp}/ck.st: data position 36 is past the end of the training "
           "split (22 bytes); resume with the data it was trained on"))],

    # modrun: tokenize
    "`FILE: cannot open: No such file or directory` (or `Permission denied`, ...)": [
        (TOK + "{tmp}/none.txt", 1,
         E("{tmp}/none.txt: cannot open: No such file or directory"))],
    "`FILE: is a directory, not a text file`": [
        (TOK + "{tmp}/dir", 1, E("{tmp}/dir: is a directory, not a text file"))],
    "`FILE: file is empty (no bytes to tokenize)`": [
        (TOK + "{tmp}/empty.txt", 1,
         E("{tmp}/empty.txt: file is empty (no bytes to tokenize)"))],
    "`FILE holds N bytes; --batch B x --seq-len S needs M bytes` (with several files: `the K input files hold N bytes; ... from --offset O needs M bytes`)": [
        (TOK + "{tmp}/short.txt --batch 3", 1,
         E("{tmp}/short.txt holds 10 bytes; --batch 3 x --seq-len 4 needs 12 "
           "bytes")),
        (TOK + "{tmp}/short.txt {tmp}/short.txt --offset 17", 1,
         E("the 2 input files hold 20 bytes; --batch 1 x --seq-len 4 from "
           "--offset 17 needs 21 bytes"))],

    # modrun: safetensors files
    "`FILE: cannot open: ...` / `FILE: not a regular file`": [
        (SHOW + "none.st", 1, E("{tmp}/none.st: cannot open: No such file or "
                                "directory")),
        (SHOW + "dir", 1, E("{tmp}/dir: not a regular file"))],
    "`FILE: not a safetensors file: N bytes, shorter than the 8-byte header length`": [
        (SHOW + "tiny.txt", 1, E("{tmp}/tiny.txt: not a safetensors file: 5 "
                                 "bytes, shorter than the 8-byte header length"))],
    "`FILE: header length N runs past the end of the file (M bytes); the file is truncated or not safetensors`": [
        (SHOW + "data.txt", 1, R(r"modrun: error: {tmp}/data.txt: header length "
                                 r"\d+ runs past the end of the file \(400 "
                                 r"bytes\); the file is truncated or not "
                                 r"safetensors"))],
    "`FILE: header is not valid JSON: ...`, `FILE: header must be a JSON object, got ...`": [
        (SHOW + "s-json.st", 1,
         R(r"modrun: error: {tmp}/s-json.st: header is not valid JSON: .+")),
        (SHOW + "s-array.st", 1,
         E("{tmp}/s-array.st: header must be a JSON object, got array"))],
    "`FILE: tensor 'NAME': dtype 'X' is not supported (modrt reads F32, I32, BF16 and F16)`": [
        (SHOW + "s-f64.st", 1, E("{tmp}/s-f64.st: tensor 'x': dtype 'F64' is "
                                 "not supported (modrt reads F32, I32, BF16 "
                                 "and F16)"))],
    "`FILE: tensor 'NAME': data_offsets [A, B] run past the end of the data (N bytes); the file is truncated`": [
        (SHOW + "s-past.st", 1, E("{tmp}/s-past.st: tensor 'x': data_offsets "
                                  "[0, 16] run past the end of the data (8 "
                                  "bytes); the file is truncated"))],
    "`FILE: tensor 'NAME': data_offsets [A, B] hold N bytes, but DTYPE [..] needs M bytes` and other `tensor 'NAME': ...` messages": [
        (SHOW + "s-size.st", 1, E("{tmp}/s-size.st: tensor 'x': data_offsets "
                                  "[0, 8] hold 8 bytes, but F32 [3] needs 12 "
                                  "bytes"))],
    "`FILE: tensor 'A' (bytes [..]) overlaps tensor 'B' (bytes [..])`, `... a hole of N unused bytes`, `FILE: extra data past the end of the last tensor ...`": [
        (SHOW + "s-overlap.st", 1, E("{tmp}/s-overlap.st: tensor 'y' (bytes "
                                     "[4, 8)) overlaps tensor 'x' (bytes [0, "
                                     "8))")),
        (SHOW + "s-hole.st", 1, E("{tmp}/s-hole.st: tensor 'y' starts at byte "
                                  "8 but the previous data ends at byte 4: a "
                                  "hole of 4 unused bytes")),
        (SHOW + "s-extra.st", 1, E("{tmp}/s-extra.st: extra data past the end "
                                   "of the last tensor ('x'): 8 bytes of data, "
                                   "tensors cover 4"))],
    "`FILE: cannot create 'FILE.tmp.PID': No such file or directory`": [
        ("{modrun} tokenize {tmp}/data.txt --seq-len 4 --out {tmp}/nodir/t.st",
         1, R(r"modrun: error: {tmp}/nodir/t.st: cannot create "
              r"'{tmp}/nodir/t.st.tmp.\d+': No such file or directory"))],
    "`FILE.tmp.PID: write failed: ...`, `fsync failed`, `close failed`, `FILE: cannot rename ...`": [
        # The output names a directory: the rename onto it fails.
        ("{modrun} tokenize {tmp}/data.txt --seq-len 4 --out {tmp}/dir", 1,
         R(r"modrun: error: {tmp}/dir: cannot rename '{tmp}/dir.tmp.\d+' into "
           r"place: Is a directory"))],

    # Running CUDA packages
    "`MODC_CUDA_DEVICE must be a device number, got \"X\"`": [
        # A stand-in CUDA package: the variable is read before any CUDA call.
        ("{modrun} forward {tmp}/f-cuda --weights " + WA + " --tokens "
         "{tmp}/ta.st --out {tmp}/o.st", 1,
         # forward names the tokens file before the runtime's message.
         E("{tmp}/ta.st: MODC_CUDA_DEVICE must be a device number, got "
           "\"gpu0\""),
         {"env": {"MODC_CUDA_DEVICE": "gpu0"}})],

    # Data-parallel training (docs/distributed.md)
    "`--comm must be auto, single, mpi or nccl, got 'X'`": [
        (DP + " --comm tcp", 2,
         "modrun: --comm must be auto, single, mpi or nccl, got 'tcp'")],
    "`--comm-timeout must be a number > 0, got 'X'`": [
        (DP + " --comm-timeout 0", 2,
         "modrun: --comm-timeout must be a number > 0, got '0'")],
    "`--shards is for one process; the N ranks of this job split each batch N ways already`": [
        (DP + " --shards 2", 2, "modrun: --shards is for one process; the 2 "
         "ranks of this job split each batch 2 ways already",
         {"env": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}})],
    "`a batch of B sequences cannot be split into P parts of at least one sequence each; give --batch >= P`": [
        (DP + " --shards 3", 1, E("a batch of 2 sequences cannot be split "
                                  "into 3 parts of at least one sequence "
                                  "each; give --batch >= 3"))],
    "`the ranks do not agree on the T: rank 0 has hash H, rank R has H2; every rank must start from the same package, weights, data and settings`": [
        (MPIRUN + " -np 1 " + DP + " : -np 1 " + DP.replace("0.01", "0.02"), 1,
         re.compile(r"modrun: error: the ranks do not agree on the training "
                    r"settings: rank 0 has hash [0-9a-f]{16}, rank 1 has "
                    r"[0-9a-f]{16}; every rank must start from the same "
                    r"package, weights, data and settings"), {"env": MPIENV})],
    "`the mpi backend is not available: its plugin libmodrt_mpi.so is not built or not found (looked for ...); build modrt where MPI (libopenmpi-dev) is installed (docs/distributed.md), or set MODRT_PLUGIN_DIR` (also `nccl`)": [
        (DP.replace("{modrun}", "{tmp}/alone/modrun") + " --comm mpi", 1,
         E("the mpi backend is not available: its plugin libmodrt_mpi.so is "
           "not built or not found (looked for {tmp}/alone/libmodrt_mpi.so, "
           "{tmp}/alone/../lib/libmodrt_mpi.so, libmodrt_mpi.so); build "
           "modrt where MPI (libopenmpi-dev) is installed "
           "(docs/distributed.md), or set MODRT_PLUGIN_DIR"))],
    "`PLUGIN: cannot load the mpi backend: ...`": [
        (DP.replace("{modrun}", "{tmp}/alone/modrun") + " --comm nccl", 1,
         E("{tmp}/alone/libmodrt_nccl.so: cannot load the nccl backend: "
           "{tmp}/alone/libmodrt_nccl.so: file too short"))],
    "`the mpi backend's plugin lacks modrt_comm_plugin_create; it is damaged or from another build`": [
        (DP.replace("{modrun}", "{tmp}/alone2/modrun") + " --comm mpi", 1,
         E("the mpi backend's plugin lacks modrt_comm_plugin_create; it is "
           "damaged or from another build"))],
    "`this process is rank R of N (VARS), but the single-process communicator was asked for; use --comm mpi (or auto), or launch one process`": [
        (DP + " --comm single", 1,
         E("rank 1: this process is rank 1 of 2 (OMPI_COMM_WORLD_RANK/"
           "OMPI_COMM_WORLD_SIZE), but the single-process communicator was "
           "asked for; use --comm mpi (or auto), or launch one process"),
         {"env": {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}})],
    "`environment variable X=\"V\" is not a rank or process count` / `environment variables A=R and B=N do not describe a rank of the job`": [
        (DP, 1, E("environment variable SLURM_PROCID=\"x\" is not a rank or "
                  "process count"),
         {"env": {"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}}),
        (DP, 1, E("environment variables PMI_RANK=2 and PMI_SIZE=2 do not "
                  "describe a rank of the job"),
         {"env": {"PMI_RANK": "2", "PMI_SIZE": "2"}})],
    "`the launcher reports N ranks (VARS), but mpi sees M: MPI does not know this launcher (with srun, try --mpi=pmix or --mpi=pmi2)`": [
        # Slurm's variables without Slurm: MPI starts a job of one process
        # (the word mpirun_... skips the case where modrt has no MPI).
        ("env mpirun_not_needed=1 " + DP + " --comm mpi", 1,
         E("rank 0: the launcher reports 2 ranks (SLURM_PROCID/SLURM_NTASKS), "
           "but mpi sees 1: MPI does not know this launcher (with srun, try "
           "--mpi=pmix or --mpi=pmi2)"),
         {"env": dict(MPIENV, SLURM_PROCID="0", SLURM_NTASKS="2")})],
    "`--rank-log DIR: cannot write DIR/rank-R.log: ...`": [
        (MPIRUN + " -np 2 " + DP + " --rank-log {tmp}/nodir", 1,
         E("rank 1 of 2: --rank-log {tmp}/nodir: cannot write "
           "{tmp}/nodir/rank-1.log: No such file or directory"),
         {"env": MPIENV})],
    # modc import-hf (fixtures hf-*: setup writes them)
    "`missing -o MODEL.json (the model description to write)` / `missing --weights W.safetensors (the weights file to write)`": [
        ("{modc} import-hf hf-ok --weights o.st", 1,
         C("missing -o MODEL.json (the model description to write)")),
        ("{modc} import-hf hf-ok -o o.json", 1,
         C("missing --weights W.safetensors (the weights file to write)"))],
    "`--gate must be linear, sigmoid or one, got 'X'` / `--causal-router must be predictor, aux_loss or none, got 'X'` / `--dtype must be f32 or bf16, got 'X'`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --gate relu", 1,
         C("--gate must be linear, sigmoid or one, got 'relu'")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --causal-router x", 1,
         C("--causal-router must be predictor, aux_loss or none, got 'x'")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --dtype f16", 1,
         C("--dtype must be f32 or bf16, got 'f16'"))],
    "`--X needs --capacity or --capacity-tokens (without them the import is dense)`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --gate linear", 1,
         C("--gate needs --capacity or --capacity-tokens (without them the import is dense)"))],
    "`--predictor-hidden is for --causal-router predictor`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --causal-router none --predictor-hidden 8", 1,
         C("--predictor-hidden is for --causal-router predictor"))],
    "`--capacity must be in (0, 1], got X` / `give --capacity or --capacity-tokens, not both` / `--capacity-tokens must be in [1, S] (seq_len), got X`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0", 1,
         C("--capacity must be in (0, 1], got 0")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --capacity-tokens 2", 1,
         C("give --capacity or --capacity-tokens, not both")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity-tokens 9", 1,
         C("--capacity-tokens must be in [1, 8] (seq_len), got 9"))],
    "`--seq-len must be in [1, N] (max_position_embeddings), got X`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --seq-len 9", 1,
         C("--seq-len must be in [1, 8] (max_position_embeddings), got 9"))],
    "`--schedule takes every_other, all, none or layer indices such as 1,3, got 'X'` / `--schedule: layer N is out of range [0, L)` / `--schedule: layer N is listed twice`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --schedule odd", 1,
         C("--schedule takes every_other, all, none or layer indices such as 1,3, got 'odd'")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --schedule 1", 1,
         C("--schedule: layer 1 is out of range [0, 1)")),
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --schedule 0,0", 1,
         C("--schedule: layer 0 is listed twice"))],
    "`DIR: not a directory (import-hf reads a checkpoint directory: config.json and model.safetensors)`": [
        ("{modc} import-hf m.json -o o.json --weights o.st", 1,
         C("m.json: not a directory (import-hf reads a checkpoint directory: config.json and model.safetensors)"))],
    "`cannot read FILE: REASON`": [
        ("{modc} import-hf dir -o o.json --weights o.st", 1,
         C("cannot read dir/config.json: No such file or directory"))],
    "`FILE: invalid JSON: [LINE:COL, byte=N]: ...` in a checkpoint / `FILE: the configuration must be a JSON object`": [
        ("{modc} import-hf hf-badjson -o o.json --weights o.st", 1,
         C("hf-badjson/config.json: invalid JSON: [1:2, byte=2]: Expected object key")),
        ("{modc} import-hf hf-array -o o.json --weights o.st", 1,
         C("hf-array/config.json: the configuration must be a JSON object"))],
    "`FILE: key 'K': V is not supported (WHY)`": [
        ("{modc} import-hf hf-scaling -o o.json --weights o.st", 1,
         C("hf-scaling/config.json: key 'rope_scaling': {\"factor\":8,\"rope_type\":\"llama3\"} is not supported (modc's RoPE is unscaled: rope_scaling must be null)")),
        ("{modc} import-hf hf-bias -o o.json --weights o.st", 1,
         C("hf-bias/config.json: key 'attention_bias': true is not supported (modc's projections have no biases)"))],
    "`FILE: key 'K': missing (an integer is required)` / `FILE: key 'K': expected an integer, got X` and the other `expected ..., got X` forms": [
        ("{modc} import-hf hf-novocab -o o.json --weights o.st", 1,
         C("hf-novocab/config.json: key 'vocab_size': missing (an integer is required)")),
        ("{modc} import-hf hf-str -o o.json --weights o.st", 1,
         C("hf-str/config.json: key 'hidden_size': expected an integer, got \"16\""))],
    "`DIR: no model.safetensors or model.safetensors.index.json`": [
        ("{modc} import-hf hf-noweights -o o.json --weights o.st", 1,
         C("hf-noweights: no model.safetensors or model.safetensors.index.json"))],
    "`FILE: key 'weight_map': missing (an object from tensor names to shard files is required)`": [
        ("{modc} import-hf hf-badindex -o o.json --weights o.st", 1,
         C("hf-badindex/model.safetensors.index.json: key 'weight_map': missing (an object from tensor names to shard files is required)"))],
    "`DIR: missing tensor 'NAME' (shape [..])`": [
        ("{modc} import-hf hf-drop -o o.json --weights o.st", 1,
         C("hf-drop: missing tensor 'model.norm.weight' (shape [16])"))],
    "`FILE: tensor 'NAME' has shape [..], expected [..]`": [
        ("{modc} import-hf hf-reshape -o o.json --weights o.st", 1,
         C("hf-reshape/model.safetensors: tensor 'model.embed_tokens.weight' has shape [32, 17], expected [32, 16]"))],
    "`FILE: unexpected tensor 'NAME' (not a parameter of the Llama model that config.json describes)`": [
        ("{modc} import-hf hf-extra -o o.json --weights o.st", 1,
         C("hf-extra/model.safetensors: unexpected tensor 'model.layers.0.mlp.up_proj.bias' (not a parameter of the Llama model that config.json describes)"))],
    "`DIR: tensor 'NAME' is in two shards: A and B`": [
        ("{modc} import-hf hf-twice -o o.json --weights o.st", 1,
         C("hf-twice: tensor 'model.norm.weight' is in two shards: hf-twice/a.safetensors and hf-twice/b.safetensors"))],
    "`FILE: tensor 'NAME' is I32, expected F32, BF16 or F16`": [
        ("{modc} import-hf hf-int -o o.json --weights o.st", 1,
         C("hf-int/model.safetensors: tensor 'model.norm.weight' is I32, expected F32, BF16 or F16"))],
    "`FILE: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but tie_word_embeddings is true`": [
        ("{modc} import-hf hf-tiedhead -o o.json --weights o.st", 1,
         C("hf-tiedhead/model.safetensors: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight', but tie_word_embeddings is true"))],
    "`the imported model is not one modc compiles: ...`": [
        ("{modc} import-hf hf-ok -o o.json --weights o.st --capacity 0.5 --schedule 0 --predictor-hidden 0", 1,
         C("the imported model is not one modc compiles: o.json: key 'mod.predictor_hidden': must be >= 1, got 0"))],
    "`cannot write MODEL.json: REASON`": [
        ("{modc} import-hf hf-ok -o nodir/o.json --weights o.st", 1,
         C("cannot write nodir/o.json: No such file or directory"))],
})

# Rows that no command can reach on a machine without a GPU, each with why.
NOT_RUNNABLE = {
    "`MoE layer L: the package returned decision D, outside [-1, 2E + N = M)` / `the forward pass returned decisions for N MoE layers, the manifest lists M`":
        "needs a package whose modc_forward writes bad MoE decisions; "
        "modrt::Package::forward sizes them from the manifest",
    "`--cuda-gemms=cutlass needs CUTLASS's headers, and this modc was configured without them: ...`":
        "needs a modc configured without CUTLASS's headers, which "
        "scripts/install-deps.sh installs",
    # Data-parallel training: faults of a running job.
    "`COLLECTIVE did not complete within T s: another rank stopped answering (killed, stuck, or failed without ending the job); ending the job (--comm-timeout sets the limit)`":
        "needs a rank that hangs; test/lit/modrun/distributed-faults.test "
        "stops one with SIGSTOP and checks this message",
    "`MPI_Init failed; is this process started by mpirun, mpiexec or srun?` / `COLLECTIVE failed: ...`":
        "needs a broken MPI installation or network",
    "`the nccl backend needs a GPU, and this machine has none` / `CUDA device D does not exist (N found)` / `COLLECTIVE failed (NCCL): ...`":
        "needs the nccl plugin (CUDA and NCCL) and GPUs",
    "`FILE: the model does not verify`":
        "every description the checks let through verifies; an internal bug",
    "`cannot move the old package aside: ...` / `cannot move the package into place: ...`":
        "a rename in a directory modc could write fails only on permissions, "
        "which root ignores",
    "`FILE: the training data exceed 4294967296 bytes (4 GiB), the most modrun holds in memory; use a part of it`":
        "needs 4 GiB of data read into memory",
    "`FILE: read failed after N of M bytes: ...`":
        "needs an I/O error while reading a regular file",
    "`sequence B is full: the model's context is S tokens`":
        "library only (DecodeSession::step); modrun stops each sequence first",
    "`PKG: decode failed (status N): MESSAGE`":
        "needs a package whose modc_decode fails after the runtime's checks",
    "`decode: the package changed layer L's cache count of sequence B from X to Y (...); the package is broken`":
        "needs a package whose modc_decode breaks the KV-cache ABI",
    # The C ABI: modrt checks the same things first, with its own messages.
    "`modc_forward: this package was compiled for seq_len S, got N` (also `modc_grad`)":
        "raw C ABI; modrt checks the shapes first",
    "`modc_forward: batch must be >= 1, got N` / `batch B is too large (at most M)`":
        "raw C ABI; through modrun B x seq_len >= 2^31 needs an 8 GiB tokens file",
    "`modc_forward: mode must be 0 (topk) or 1 (causal)`":
        "raw C ABI; modrun passes only the two modes",
    "`modc_forward: causal mode needs mod.causal_router aux_loss or predictor; this model has none` (status 2)":
        "raw C ABI; modrt refuses causal mode first",
    "`modc_forward: token T at sequence b position p is outside the vocabulary [0, V)` (also `modc_grad`, `modc_decode`)":
        "raw C ABI; modrt checks tokens first",
    "`modc_forward: a KV-cache prefill needs mode causal, kv_counts and prefill_lengths` / `prefill length L of sequence b is outside [0, S]`":
        "raw C ABI; modrt's prefill always passes them",
    "`modc_forward: this package has no decode entry, so no KV cache to prefill` (status 2)":
        "raw C ABI; modrt refuses decoding such packages first",
    "`modc_decode: position P of sequence b is outside the context [0, S)`":
        "raw C ABI; modrt stops a full sequence first",
    "`modc_adamw: the gradient norm is not finite`":
        "raw C ABI; modrun reports it as `step N: gradient norm is not finite`",
    "`...: a required pointer is null`":
        "raw C ABI; modrt passes every pointer",
    # CUDA: the text comes from a CUDA package running on (or looking for) a GPU.
    "`PKG: opening the GPU failed (status 3): modc_cuda_init: no usable CUDA device (REASON); this package was compiled for ARCH: run it on a GPU or compile the model with --target cpu`":
        "needs a CUDA package (nvcc), text from its modc_cuda_init",
    "`PKG: opening the GPU failed (status 3): modc_cuda_init: this package was compiled for sm_90a; device N (NAME) is sm_XY: recompile with --arch ...`":
        "needs a GPU of another architecture",
    "`PKG: opening the GPU failed (status 1): modc_cuda_init: device N does not exist (M found)`":
        "needs a GPU and a CUDA package",
    "`PKG: allocating device memory failed (status 3): modc_cuda_alloc: cannot allocate N bytes of device memory: out of memory`":
        "needs a GPU to run out of memory",
    "`PKG: forward failed (status 3): modc_cuda_sync: a kernel failed: ...`":
        "needs a failing kernel on a GPU",
    "`modc_cuda_sync`: `ENTRY: token at sequence S position P is outside the vocabulary [0, V); the outputs are invalid`":
        "raw C ABI of a CUDA package on a GPU",
    "`modc_cuda_sync`: `modc_decode: the position of sequence b is outside the context [0, S); the outputs are invalid`":
        "raw C ABI of a CUDA package on a GPU",
}

# A stand-in libmodel.so: the ABI's symbols around a given manifest. Its
# entry points do nothing, or fail when FAKE_FAIL names them.
FAKE_C = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
static int fails(const char *e) {
  const char *f = getenv("FAKE_FAIL");
  return f && strcmp(f, e) == 0;
}
uint32_t modc_abi_version(void) { return ABI; }
const char *modc_manifest_json(void) { return MANIFEST; }
uint64_t modc_forward_workspace_bytes(int64_t b) { return 64 * b; }
#ifndef NO_FORWARD
int32_t modc_forward(const void *a) { return fails("forward"); }
#endif
uint64_t modc_grad_workspace_bytes(int64_t b) { return 64 * b; }
int32_t modc_grad(const void *a) { return fails("grad"); }
int32_t modc_adamw(const void *a) { return fails("adamw"); }
uint64_t modc_eval_workspace_bytes(int64_t b) { return 64 * b; }
int32_t modc_eval(const void *a) { return fails("eval"); }
uint64_t modc_eval_causal_workspace_bytes(int64_t b) { return 64 * b; }
int32_t modc_eval_causal(const void *a) { return fails("eval_causal"); }
uint64_t modc_kv_cache_bytes(int64_t b) { return 64 * b; }
uint64_t modc_decode_workspace_bytes(int64_t b) { return 64 * b; }
int32_t modc_decode(const void *a) { return fails("decode"); }
const char *modc_last_error(void) { return "stand-in: refused"; }
int32_t modc_cuda_init(int32_t d) { return 3; }
const char *modc_cuda_arch(void) { return "sm_90a"; }
int32_t modc_cuda_alloc(uint64_t n, void **p) { return 3; }
int32_t modc_cuda_free(void *p) { return 0; }
int32_t modc_cuda_copy(void *d, const void *s, uint64_t n, int32_t k) { return 3; }
int32_t modc_cuda_memset(void *p, int32_t v, uint64_t n) { return 3; }
int32_t modc_cuda_sync(void) { return 0; }
"""


# Tokenizers (--tokenizer, or the one a package names).
TJ = " --tokenizer {tmp}/"
TOKUNSUP = ("is not supported (modrun reads byte-level BPE tokenizers: "
            "docs/runtime.md, \"Tokenizers\")")
CASES.update({
    "`TOKENIZER: cannot open: ...` / `TOKENIZER: is a directory, not a tokenizer.json`": [
        (TOK + "{tmp}/data.txt" + TJ + "tj-none.json", 1,
         E("{tmp}/tj-none.json: cannot open: No such file or directory")),
        (TOK + "{tmp}/data.txt" + TJ, 1,
         E("{tmp}/: is a directory, not a tokenizer.json"))],
    "`TOKENIZER: not valid JSON: ...` / `TOKENIZER: must be a JSON object (a Hugging Face tokenizer.json), got ...`": [
        (TOK + "{tmp}/data.txt" + TJ + "tj-bad.json", 1,
         R(r"modrun: error: {tmp}/tj-bad.json: not valid JSON: .+")),
        (TOK + "{tmp}/data.txt" + TJ + "tj-array.json", 1,
         E("{tmp}/tj-array.json: must be a JSON object (a Hugging Face "
           "tokenizer.json), got array"))],
    "`TOKENIZER: KEY: WHAT is not supported (modrun reads byte-level BPE tokenizers: docs/runtime.md, \"Tokenizers\")`": [
        (TOK + "{tmp}/data.txt" + TJ + "tj-unigram.json", 1,
         E("{tmp}/tj-unigram.json: model.type: 'Unigram' " + TOKUNSUP)),
        (TOK + "{tmp}/data.txt" + TJ + "tj-nfc.json", 1,
         E("{tmp}/tj-nfc.json: normalizer: a normalizer ('NFC') " + TOKUNSUP))],
    "`TOKENIZER: KEY: missing` and other `TOKENIZER: KEY: ...` messages": [
        (TOK + "{tmp}/data.txt" + TJ + "tj-nomerges.json", 1,
         E("{tmp}/tj-nomerges.json: model.merges: missing")),
        (TOK + "{tmp}/data.txt" + TJ + "tj-badmerge.json", 1,
         E("{tmp}/tj-badmerge.json: model.merges[0]: 'zz' is not in "
           "model.vocab"))],
    "`TOKENIZER: byte 0xXX has no token: model.vocab lacks its byte-level symbol 'S' (an unknown byte needs byte_fallback, which modrun does not support)`": [
        (TOK + "{tmp}/ff.txt" + TJ + "tj-noff.json", 1,
         E("{tmp}/tj-noff.json: byte 0xFF has no token: model.vocab lacks "
           "its byte-level symbol '\u00ff' (an unknown byte needs "
           "byte_fallback, which modrun does not support)"))],
    "`PKG: the tokenizer TOKENIZER has N tokens (ids up to M), more than the model's vocab_size V`": [
        (SAMPLE + " --prompt hi --max-new 1" + TJ + "tj.json", 1,
         E("{tmp}/pa: the tokenizer {tmp}/tj.json has 300 tokens (ids up "
           "to 299), more than the model's vocab_size 256"))],
    "`--prompt is N tokens, longer than the model's context of S tokens (seq_len)`": [
        (SAMPLE + " --prompt abcdefghijkl --max-new 1" + TJ + "tj-small.json",
         1, E("--prompt is 11 tokens, longer than the model's context of 8 "
              "tokens (seq_len)"))],
    "`PKG/manifest.json: manifest key 'tokenizer': \"X\" must be a file name relative to the package directory, inside it`": [
        ("{modrun} info {tmp}/k-tok", 1,
         E("{tmp}/k-tok/manifest.json: manifest key 'tokenizer': "
           "\"../tokenizer.json\" must be a file name relative to the "
           "package directory, inside it"))],
})


def write_st(path, tensors, metadata=None, raw_header=None, data=b""):
    """Writes a safetensors file: tensors is [(name, dtype, shape, bytes)]."""
    if raw_header is None:
        header, blob = {}, b""
        if metadata:
            header["__metadata__"] = metadata
        for name, dtype, shape, body in tensors:
            header[name] = {"dtype": dtype, "shape": shape,
                            "data_offsets": [len(blob), len(blob) + len(body)]}
            blob += body
        raw_header, data = json.dumps(header).encode(), blob
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw_header)) + raw_header + data)


def read_st(path):
    """(metadata, [(name, dtype, shape, bytes)]) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = [(k, v["dtype"], v["shape"],
                data[v["data_offsets"][0]:v["data_offsets"][1]])
               for k, v in header.items()]
    return meta, tensors


def i32(values):
    return array.array("i", list(values)).tobytes()


def make_package(tmp, name, source, manifest, lib=None):
    """A package directory: `source`'s files with `manifest` (a dict, or
    text) and `lib` (bytes) in place of its own."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    with open(os.path.join(d, "manifest.json"), "w") as f:
        f.write(manifest if isinstance(manifest, str) else json.dumps(manifest))
    if lib is None:
        shutil.copy(os.path.join(tmp, source, "libmodel.so"), d)
    elif lib:
        with open(os.path.join(d, "libmodel.so"), "wb") as f:
            f.write(lib)


def make_fake(tmp, name, manifest, cc, abi, *defines, embedded=None):
    """A package with a stand-in library built from FAKE_C around `manifest`
    (the library embeds `embedded` instead when given)."""
    text = json.dumps(manifest)
    make_package(tmp, name, None, text, lib=b"")
    src = os.path.join(tmp, name + ".c")
    with open(src, "w") as f:
        f.write("#define MANIFEST %s\n#define ABI %d\n%s"
                % (json.dumps(text if embedded is None else embedded), abi,
                   FAKE_C))
    subprocess.run([cc, "-shared", "-fPIC", "-w", "-o",
                    os.path.join(tmp, name, "libmodel.so"), src]
                   + ["-D" + d for d in defines], check=True)


def setup(tmp, modc, modrun, root):
    """Writes every fixture the cases name. Returns the cases to skip, with
    why, when this machine cannot make their fixture."""
    skips = {}
    def path(*p):
        return os.path.join(tmp, *p)
    def write(name, text, mode="w"):
        with open(path(name), mode) as f:
            f.write(text)
    write("m.json", MODEL)
    # A bf16 model whose forward products run on CUTLASS kernels, which a
    # modc configured without CUTLASS's headers refuses to build.
    write("mcutlass.json", MODEL.replace("}", ', "dtype": "bf16"}'))
    probe = subprocess.run(
        [modc, "compile", path("mcutlass.json"), "--target", "cuda",
         "--cuda-gemms=cutlass", "--nvcc", "/bin/false", "--no-kernel-cache",
         "-o", path("probe")], capture_output=True, text=True)
    if "needs CUTLASS's headers" in probe.stderr:
        skips["mcutlass"] = "modc was configured without CUTLASS's headers"
    for name, body in BAD_MODELS.items():
        write(name, body)
    # The packages, compiled in parallel (the slow part of the run).
    procs = []
    for name, model in PACKAGES.items():
        write(name + ".json", model)
        procs.append(subprocess.Popen(
            [modc, "compile", path(name + ".json"), "-o", path(name)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("modc failed on a fixture:\n" + p.stderr.read())
    for pkg, w in (("pa", "wa.st"), ("pb", "wb.st"), ("pc", "wc.st")):
        subprocess.run([modrun, "init", path(pkg), "--seed", "1", "--out",
                        path(w)], check=True, capture_output=True)

    # Text inputs.
    write("data.txt", ("The quick brown fox jumps over the lazy dog. " * 9)[:400])
    write("d40.txt", "x" * 40)
    write("mid.txt", "y" * 15)
    write("short.txt", "0123456789")
    write("tiny.txt", "01234")
    write("empty.txt", "")
    write("gap.txt", "ab\n\ncd\n")
    os.makedirs(path("dir"))
    write("dir/keep", "not a package")
    write("bad.mlir", "garbage\n")
    write("empty.mlir", "module {}\n")
    # A C++ compiler that answers modc's -march query and fails on the rest.
    cxx = shutil.which(os.environ.get("CXX") or "c++") or "c++"
    write("half-cxx", '#!/bin/sh\ncase "$*" in *-dM*) exec %s "$@";; esac\n'
          'echo "stand-in: refused" >&2\nexit 3\n' % cxx)
    os.chmod(path("half-cxx"), 0o755)

    # Hugging Face checkpoints for modc import-hf (one layer, 8 positions).
    hf = ('"model_type": "llama", "vocab_size": 32, "hidden_size": 16, '
          '"intermediate_size": 24, "num_hidden_layers": 1, '
          '"num_attention_heads": 2, "max_position_embeddings": 8')
    make_hf = os.path.join(root, "test", "lit", "Inputs", "make_hf_checkpoint.py")
    for name, config, flags in [
            ("ok", hf, []), ("drop", hf, ["--drop", "model.norm.weight"]),
            ("reshape", hf, ["--reshape", "model.embed_tokens.weight"]),
            ("extra", hf, ["--extra", "model.layers.0.mlp.up_proj.bias"]),
            ("int", hf, ["--int", "model.norm.weight"]),
            ("tiedhead", hf + ', "tie_word_embeddings": true', ["--lm-head"]),
            ("twice", hf, None), ("noweights", hf, None),
            ("badindex", hf, None),
            ("scaling", '"model_type": "llama", "rope_scaling": '
                        '{"factor": 8.0, "rope_type": "llama3"}', None),
            ("bias", '"model_type": "llama", "attention_bias": true', None),
            ("novocab", '"model_type": "llama"', None),
            ("str", '"model_type": "llama", "vocab_size": 32, '
                    '"hidden_size": "16"', None)]:
        os.makedirs(path("hf-" + name))
        write("hf-%s/config.json" % name, "{%s}" % config)
        if flags is not None:
            subprocess.run([sys.executable, make_hf, path("hf-" + name)] + flags,
                           check=True)
    norm = ("model.norm.weight", "F32", [16], bytes(64))
    write_st(path("hf-twice", "a.safetensors"), [norm])
    write_st(path("hf-twice", "b.safetensors"), [norm])
    write("hf-twice/model.safetensors.index.json", json.dumps(
        {"weight_map": {"model.norm.weight": "a.safetensors",
                        "x": "b.safetensors"}}))
    write("hf-badindex/model.safetensors.index.json", '{"weights": {}}')
    os.makedirs(path("hf-badjson"))
    write("hf-badjson/config.json", "{,}")
    os.makedirs(path("hf-array"))
    write("hf-array/config.json", "[]")

    # Token files.
    data = open(path("data.txt"), "rb").read()
    write_st(path("ta.st"), [("tokens", "I32", [2, 8], i32(data[:16]))])
    write_st(path("tg.st"), [("tokens", "I32", [2, 9], i32(data[:18]))])
    write_st(path("t-300.st"), [("tokens", "I32", [2, 8],
                                 i32(list(data[:11]) + [300] + list(data[12:16])))])
    write_st(path("t-big.st"), [("tokens", "I32", [200000, 8],
                                 bytes(4 * 200000 * 8))])
    write_st(path("tg-big.st"), [("tokens", "I32", [100000, 9],
                                  bytes(4 * 100000 * 9))])

    # Weights of package A, altered.
    meta, wa = read_st(path("wa.st"))
    def scaled(names, factor):
        out = []
        for n, dt, sh, body in wa:
            if names is None or n in names:
                a = array.array("f")
                a.frombytes(body)
                body = array.array("f", [x * factor for x in a]).tobytes()
            out.append((n, dt, sh, body))
        return out
    write_st(path("w-nan.st"), scaled(None, float("nan")))
    write_st(path("w-huge.st"), scaled({"embed.weight", "final_norm.weight"},
                                       1e19))
    write_st(path("w-i32.st"), [(n, "I32" if n == "embed.weight" else dt, sh, b)
                                for n, dt, sh, b in wa])
    write_st(path("w-extra.st"), wa + [("tokens", "I32", [1], i32([0]))])

    # A checkpoint of two steps, and damaged copies.
    subprocess.run([modrun, "train", path("pa"), "--data", path("data.txt"),
                    "--steps", "2", "--batch", "2", "--lr", "0.01", "--seed",
                    "1", "--out", path("ck.st")], check=True,
                   capture_output=True)
    meta, ck = read_st(path("ck.st"))
    def ckpt(name, meta_change=None, drop=(), extra=()):
        m = dict(meta)
        for k, v in (meta_change or {}).items():
            if v is None:
                m.pop(k)
            else:
                m[k] = v
        write_st(path(name), [t for t in ck if t[0] not in drop] + list(extra),
                 metadata=m)
    ckpt("ck-nostep.st", {"step": None})
    ckpt("ck-badstep.st", {"step": "-1"})
    ckpt("ck-badlr.st", {"lr": "x"})
    ckpt("ck-now.st", drop=("embed.weight",))
    ckpt("ck-nom.st", drop=("adam.m.embed.weight",))
    ckpt("ck-extrav.st", extra=[("adam.v.bogus", "F32", [1], bytes(4))])

    # Safetensors files broken one way each.
    f32 = lambda n: bytes(4 * n)
    write_st(path("s-json.st"), None, raw_header=b"{bad")
    write_st(path("s-array.st"), None, raw_header=b"[]")
    write_st(path("s-f64.st"), [("x", "F64", [1], bytes(8))])
    def st(name, entries, size):
        header = {n: {"dtype": "F32", "shape": s, "data_offsets": o}
                  for n, s, o in entries}
        write_st(path(name), None, raw_header=json.dumps(header).encode(),
                 data=bytes(size))
    st("s-past.st", [("x", [4], [0, 16])], 8)
    st("s-size.st", [("x", [3], [0, 8])], 8)
    st("s-overlap.st", [("x", [2], [0, 8]), ("y", [1], [4, 8])], 8)
    st("s-hole.st", [("x", [1], [0, 4]), ("y", [1], [8, 12])], 12)
    st("s-extra.st", [("x", [1], [0, 4])], 8)

    # Tokenizers: the 300-token fixture, broken copies of it, and a small
    # one (98 tokens) that fits package A.
    tj = json.load(open(os.path.join(root, "test/data/tokenizer/tokenizer.json"),
                        encoding="utf-8"))
    def tokenizer(name, change=None, text=None):
        t = json.loads(json.dumps(tj))
        if change:
            change(t)
        with open(path(name), "w", encoding="utf-8") as f:
            f.write(text if text is not None else json.dumps(t))
    tokenizer("tj.json")
    tokenizer("tj-bad.json", text="{")
    tokenizer("tj-array.json", text="[]")
    tokenizer("tj-unigram.json", lambda t: t["model"].update(type="Unigram"))
    tokenizer("tj-nfc.json", lambda t: t.update(normalizer={"type": "NFC"}))
    tokenizer("tj-nomerges.json", lambda t: t["model"].pop("merges"))
    tokenizer("tj-badmerge.json",
              lambda t: t["model"].update(merges=["a zz"]))
    def no_ff(t):
        t["model"]["vocab"].pop("\u00ff")
        t["model"]["merges"] = [m for m in t["model"]["merges"]
                                if "\u00ff" not in m]
    tokenizer("tj-noff.json", no_ff)
    write("ff.txt", b"abcd\xff", "wb")
    vocab = {"\u0120": 0, "ab": 95, "\u0120a": 96}
    vocab.update({chr(b): b - 0x20 for b in range(0x21, 0x7f)})
    tokenizer("tj-small.json", text=json.dumps({
        "added_tokens": [{"id": 97, "content": "<|end|>", "special": True}],
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab,
                  "merges": ["a b", "\u0120 a"]}}))

    # Copies of package A with one part damaged.
    man = json.load(open(path("pa", "manifest.json")))
    lib = open(path("pa", "libmodel.so"), "rb").read()
    def edited(change):
        m = json.loads(json.dumps(man))
        change(m)
        return m
    make_package(tmp, "k-nolib", "pa", man, lib=b"")
    make_package(tmp, "k-json", "pa", "{")
    make_package(tmp, "k-abi", "pa", edited(lambda m: m.update(abi_version=999)))
    make_package(tmp, "k-feat", "pa", edited(
        lambda m: m["cpu"]["features"].append("bogus")))
    header = open(os.path.join(root, "runtime/include/modrt/CpuFeatures.h")).read()
    known = re.findall(r'X\("([^"]+)", "__', header)
    lacking = [f for f in reversed(known) if f not in man["cpu"]["features"]]
    if lacking and man["target"] == "cpu":
        make_package(tmp, "k-cpu", "pa", edited(
            lambda m: m["cpu"]["features"].append(lacking[0])))
    else:
        skips["k-cpu"] = "this CPU has every feature modrt knows"
    make_package(tmp, "k-trunc", "pa", man, lib=lib[:len(lib) // 2])
    make_package(tmp, "k-notelf", "pa", man, lib=b"not a shared library\n")
    make_package(tmp, "k-edit", "pa", edited(
        lambda m: m.update(compiler_version="0.0.0-edited")))
    make_package(tmp, "k-key", "pa", edited(lambda m: m["model"].pop("seq_len")))
    make_package(tmp, "k-adamw", "pa", edited(lambda m: m["entries"].pop("adamw")))
    make_package(tmp, "k-tok", "pa", edited(
        lambda m: m.update(tokenizer="../tokenizer.json")))
    manc = json.load(open(path("pc", "manifest.json")))
    manc["entries"]["decode"] = man["entries"]["decode"]
    make_package(tmp, "k-decode", "pc", manc)

    # Stand-in libraries (the C compiler modc uses builds them).
    cc = shutil.which(os.environ.get("CC") or "cc") or cxx
    abi = man["abi_version"]
    make_fake(tmp, "f-real", man, cc, abi)
    make_fake(tmp, "f-noexport", man, cc, abi, "NO_FORWARD")
    make_fake(tmp, "f-badjson", man, cc, abi, embedded="{")
    make_fake(tmp, "f-notrain", edited(
        lambda m: [m["entries"].pop(k) for k in ("grad", "adamw")]), cc, abi)
    make_fake(tmp, "f-nodecode", edited(lambda m: m["entries"].pop("decode")),
              cc, abi)
    def one_token(m):
        m["model"]["seq_len"] = 1
        for layer in m["layers"]:
            if "capacity" in layer:
                layer["capacity"] = 1
    make_fake(tmp, "f-seq1", edited(one_token), cc, abi)
    def target(name, arch=None):
        def change(m):
            m["target"] = name
            m.pop("cpu")
            if arch:
                m["arch"] = arch
        return change
    make_fake(tmp, "f-tpu", edited(target("tpu")), cc, abi)
    make_fake(tmp, "f-cuda", edited(target("cuda", "sm_90a")), cc, abi)

    # modrun copied alone (no plugin beside it; a damaged nccl plugin), and
    # beside a library that is no plugin.
    for d in ("alone", "alone2"):
        os.makedirs(path(d))
        shutil.copy(modrun, path(d, "modrun"))
    write("alone/libmodrt_nccl.so", "garbage\n")
    write("noplugin.c", "int modrt_something_else;\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o",
                    path("alone2", "libmodrt_mpi.so"), path("noplugin.c")],
                   check=True)
    if not shutil.which("mpirun"):
        skips["mpirun"] = "Open MPI's mpirun is not installed"
    elif not os.path.exists(os.path.join(os.path.dirname(modrun),
                                         "libmodrt_mpi.so")):
        skips["mpirun"] = "modrt was built without MPI (no libmodrt_mpi.so)"
    return skips


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
    # Absolute: the commands run in the temporary directory.
    doc, modc, modrun = (os.path.abspath(a) for a in sys.argv[1:4])
    root = os.path.dirname(os.path.dirname(os.path.abspath(doc)))
    failures = []
    rows = documented_rows(doc)
    documented = {r for section in rows.values() for r in section}
    for r in sorted(documented):
        if r in CASES and r in NOT_RUNNABLE:
            failures.append("row %s has a case and is listed as not runnable"
                            % r)
        elif r not in CASES and r not in NOT_RUNNABLE:
            failures.append("no case for the documented error %s (add one, or "
                            "list it in NOT_RUNNABLE with the reason)" % r)
    for key in list(CASES) + list(NOT_RUNNABLE):
        if key not in documented:
            failures.append("%s matches no row of docs/errors.md (reworded or "
                            "removed?)" % key)
    ran = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        skips = setup(tmp, modc, modrun, root)
        sub = lambda s: s.replace("{modc}", modc).replace(
            "{modrun}", modrun).replace("{tmp}", tmp)
        for key, cases in CASES.items():
            for case in cases:
                args, status, expected = case[:3]
                options = case[3] if len(case) > 3 else {}
                words = args.split(" ") if isinstance(args, str) else args
                argv = [sub(a) for a in words]
                why = [s for s in skips if any(s in a for a in argv)]
                if why:
                    print("SKIP: %s: %s" % (key, skips[why[0]]))
                    skipped += 1
                    continue
                env = dict(os.environ, **options.get("env", {}))
                limit = options.get("as_limit")
                preexec = (lambda: resource.setrlimit(
                    resource.RLIMIT_AS, (limit, limit))) if limit else None
                p = subprocess.run(argv, capture_output=True, text=True,
                                   errors="replace", cwd=tmp, timeout=120,
                                   env=env, preexec_fn=preexec)
                ran += 1
                lines = p.stderr.split("\n")
                if isinstance(expected, str):
                    found = sub(expected) in lines
                    want = sub(expected)
                else:
                    want = expected.pattern.replace("{tmp}", re.escape(tmp))
                    found = any(re.fullmatch(want, l) for l in lines)
                what = "%s: `%s`" % (key, " ".join(argv))
                if p.returncode != status:
                    failures.append("%s: exit status %d, expected %d" %
                                    (what, p.returncode, status))
                if not found:
                    failures.append("%s: no stderr line %r in:\n%s" %
                                    (what, want, p.stderr))
                if not p.stderr.endswith("\n"):
                    failures.append("%s: stderr does not end with a newline: "
                                    "%r" % (what, p.stderr[-80:]))
    for f in failures:
        print("FAIL:", f)
    print("%d documented errors: %d with cases (%d commands run, %d skipped), "
          "%d not runnable here; %d failures"
          % (len(documented), len(documented & set(CASES)), ran, skipped,
             len(documented & set(NOT_RUNNABLE)), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
