#!/usr/bin/env python3
# ===- report.py - side-by-side tables of the GPU benchmark's JSON lines ---===#
#
# Reads the JSON lines of bench_gpu (impl "modc"; dtype "bf16" or "f32", the
# package's) and torch_gpu.py (torch_eager, torch_compile, torch_cudagraph;
# bf16 and f32) and prints markdown tables, times in ms (medians), each
# comparison within one dtype (ours bf16 beside PyTorch bf16, ours f32
# beside PyTorch f32):
#
#   0. The targets, in bf16, measured against the target: our MoD
#      block <= 0.18x our dense block (forward) and <= 0.2x (forward +
#      backward); ours >= 2x faster than torch.compile's MoD block (forward,
#      forward + backward); our gathered GEMMs >= 0.85x cuBLAS's throughput
#      at the same shape, and routing (router + select + gather) <= 10 % of
#      the MoD block's time, both from the per-kernel profile (below).
#   1. The MoD block: ours (model with the routed layer minus the model with
#      no layer) beside PyTorch eager and torch.compile (the layer alone),
#      with the ratios ours / torch (< 1: ours is faster), per dtype.
#   2. The same for the dense block (eager; compile only when timed).
#   3. The decode step, block share (model minus the 0-layer model), ours
#      beside PyTorch eager and CUDA-graph replay, per dtype.
#   4. MoD / dense per implementation and dtype (< 1: routing pays).
#   5. Ours bf16 / ours f32 (what the bf16 products buy).
#   6. Whole models, no subtraction: ours beside eager and CUDA graphs.
#   7. Check of the subtraction: PyTorch eager's model difference against its
#      layer timed alone (near 1 means the difference measures the block).
#   8. Our gathered GEMMs against cuBLAS, per GEMM and all together.
#   9. Routing's share of the MoD block.
#  10. bf16 on sm_90a: the MoD block with its products on wgmma (impl
#      "modc") against mma.sync (impl "modc_mma": run.sh's second run with
#      --cuda-gemms='path=mma').
#  11. bf16 on sm_90a, forward and forward+backward: wgmma fed by TMA
#      (impl "modc") against wgmma reading its operands itself (impl
#      "modc_notma": the third run, --cuda-gemms='tma=false').
#  12. bf16 on sm_90a: the MoD block with the selection's fused gather on
#      the blocks a sequence modk-configure-gemms chose (impl "modc")
#      against one (impl "modc_gather1": --cuda-gemms='gather-blocks=1').
#  13. The MoD block with every epilogue fusion (impl "modc") against none
#      (impl "modc_nofuse": packages compiled with --no-fuse=residual-add,
#      activation,rows-epilogue,router-norm,select-gather,copy), per dtype,
#      forward and forward+backward.
#  14. bf16 on sm_90a, the decode step of the 0-layer and the MoD model:
#      few-row products on the weight-streaming kernel (impl "modc")
#      against the tile kernels (impl "modc_stream0": --cuda-gemms=
#      'stream-rows=0').
#  15. The bf16 MoD model with every fusion (impl "modc") against the same
#      with one fusion left out (impl "modc_no-FUSION": --no-fuse=FUSION),
#      whole model, forward, forward+backward and decode: each fusion's
#      effect alone.
#  16. MoDE (MoE with no-op experts, docs/model-format.md section 7), bf16:
#      the MoE MLP sublayer as bench_gpu's 1-layer model minus the same
#      layer with a width-1 dense MLP (kinds "moe_mode", "moe_n0",
#      "moe_stub"): MoDE's against the same layer's without no-op experts
#      (target <= 0.6x), and against torch_mode.py's PyTorch sublayer (impl
#      "torch_mode", the faster of its two formulations; targets >= 1.5x
#      eager, >= 1.2x torch.compile), with the share of the tokens each
#      router kept, sent to no-op experts and dropped (the operating point).
#  17. bf16, the decode step at batch 1 and 64 (run.sh's DECODE_BATCHES),
#      whole 1-layer models: ours against PyTorch's CUDA graph (target
#      <= 0.8x at both batches) and the MoD model's speed-up over the dense
#      one (target >= 1.5x at batch 1). The other tables take only the
#      lines at the run's batch (--batch, default the most lines' batch).
#  18. The whole model's training step (forward, backward and AdamW; what
#      "train": bench_gpu's modc_train_step, torch_gpu.py's loss, backward
#      and fused AdamW step), per dtype, width and kind: ours beside PyTorch
#      eager and the torch.compile'd model, and the speed-up over
#      torch.compile at the same global batch (tokens/s; target >= 1.5x for
#      the bf16 MoD model), the MoD model's CUTLASS twin (impl
#      "modc_cutlass") in a row of its own.
#
# 8 and 9 read the per-kernel profiles run.sh writes beside the JSON lines,
# profile_mod_dN.txt (f32) and profile_mod_dN_bf16.txt: bench_gpu's stderr
# under MODC_PROFILE=1 with --only forward,fwd_bwd --warmup 1 --iters 1,
# one line `modc profile: kernel I WHAT T ms` per kernel group, I counting
# from 0 again at each entry call. Rules:
#   - the forward pass: the calls are cut where I falls back to 0; the
#     forward calls are the leading calls (the first entry printed is
#     modc_forward) up to the first with a backward kernel (a name with
#     "grad", "cross_entropy", "bce_loss" or "split_tokens": modc_grad), and
#     of those the last complete one (ending in the LM head) is used: the
#     timed pass after the warm-up pass.
#   - the routed block: that call's kernels less the model's own: the
#     leading modk.embed and modk.identity_rows (the 0-layer model runs them
#     too), and the last two, the final norm (modk.rows) and the LM head (the
#     last modk.gemm, N = the vocabulary, 256). What is left is the layer.
#   - the gathered GEMMs: the block's modk.gemm lines, "modk.gemm EPILOGUE
#     [NxK]" or "[NxK]x2" (swiglu: two weights of that shape); FLOPs
#     2*M*N*K per weight with M = B*k (batch x capacity_tokens of our JSON
#     line, else the cuBLAS line's M), set against the cuBLAS line of the
#     same dtype, d_model and M, N, K (twice its time for x2). ours/cuBLAS
#     = cuBLAS time / ours (throughput ratio); all together = the sum of
#     cuBLAS times / the sum of ours (time-weighted).
#   - routing: the block's modk.route_select lines (router logits, top-k
#     select) and the modk.rows line after each (the gather, with the
#     layer's first RMSNorm) / the sum of all the block's lines.
# The profile records a CUDA event after every kernel group and reads them
# when the entry ends: GPU times with no host wait, but each group still
# starts with its launch (no CUDA graph), so short kernels look a little
# slower than in the unprofiled run (the ratio to cuBLAS is on the low side,
# most for the d x d GEMMs at d 1024).
#
# Missing measurements print as "-" ("not measured" in the targets); rows
# with nothing measured at all are left out.
#
# Usage: report.py RESULTS.jsonl [--profiles DIR]
#        (DIR: where profile_mod_d*.txt are; default: RESULTS.jsonl's folder)
#
# ===-----------------------------------------------------------------------===#

import argparse
import glob
import json
import os
import re
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return rows


class Table:
    def __init__(self, rows, batch=None):
        self.t = {}
        # The run's batch (run.sh's BATCH): by default the one most lines
        # have. Decode lines at other batches (run.sh's DECODE_BATCHES) go
        # to self.decode_sweep, (impl, dtype, kind, d, batch) -> ms, and not
        # into the tables at the run's batch.
        if batch is None:
            counts = {}
            for r in rows:
                if "median_ms" in r and "batch" in r:
                    counts[r["batch"]] = counts.get(r["batch"], 0) + 1
            batch = max(counts, key=counts.get) if counts else None
        self.batch = batch
        self.decode_sweep = {}
        # MoE routing shares of our MoE models' lines: (kind, d) -> dict.
        self.moe_shares = {}
        # torch_mode.py's lines (the PyTorch MoDE sublayer).
        self.torch_mode = [r for r in rows if r.get("impl") == "torch_mode"]
        self.errors = [r for r in rows if "error" in r or "skipped" in r]
        # cuBLAS alone at our GEMM shapes: (dtype, d, M, N, K) -> ms.
        self.cublas = {}
        # Our MoD model's rows: (dtype, d) -> (batch, capacity_tokens).
        self.mod_rows = {}
        for r in rows:
            if "median_ms" not in r:
                continue
            if r.get("impl") == "cublas":
                self.cublas[(r["dtype"], r["d_model"], r["M"], r["N"],
                             r["K"])] = r["median_ms"]
                continue
            if (r["what"] == "decode" and r.get("scope", "model") == "model"
                    and "batch" in r):
                self.decode_sweep[(r["impl"], r["dtype"], r["kind"],
                                   r["d_model"], r["batch"])] = r["median_ms"]
            if r.get("batch", self.batch) != self.batch:
                continue  # a decode line of the sweep
            if r["impl"] == "modc" and "moe_kept" in r:
                self.moe_shares[(r["kind"], r["d_model"])] = {
                    k: r[f"moe_{k}"] for k in ("kept", "noop", "dropped")}
            if (r["impl"] == "modc" and r["kind"] == "mod" and "batch" in r
                    and "capacity_tokens" in r):
                self.mod_rows[(r["dtype"], r["d_model"])] = (
                    r["batch"], r["capacity_tokens"])
            key = (r["impl"], r["dtype"], r.get("scope", "model"), r["kind"],
                   r["d_model"], r["what"])
            self.t[key] = r["median_ms"]
        self.ds = sorted({k[4] for k in self.t} |
                         {k[3] for k in self.decode_sweep})

    def get(self, impl, dtype, scope, kind, d, what):
        return self.t.get((impl, dtype, scope, kind, d, what))

    def block(self, impl, dtype, kind, d, what):
        """The layer's time: timed alone where impl did that, otherwise the
        model with it minus the model without."""
        alone = self.get(impl, dtype, "block", kind, d, what)
        if alone is not None:
            return alone
        return self.diff(impl, dtype, kind, d, what)

    def diff(self, impl, dtype, kind, d, what):
        a = self.get(impl, dtype, "model", kind, d, what)
        b = self.get(impl, dtype, "model", "none", d, what)
        return None if a is None or b is None else a - b


def fmt(x, digits=3):
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:.1f}"
    if abs(x) >= 10:
        return f"{x:.2f}"
    return f"{x:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def table(header, rows):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        r = list(r) + [""] * (len(header) - len(r))
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


DTYPES = ("bf16", "f32")
WHATS = ("forward", "fwd_bwd")
PASS_NAME = {"forward": "forward", "fwd_bwd": "forward+backward",
             "decode": "decode"}

# The targets, all in bf16: (what, kind of check, bound).
#   "mod/dense": our MoD block time / our dense block time <= bound;
#   "speedup vs compile": torch.compile MoD block / our MoD block >= bound.
TARGETS = (("forward", "mod/dense", 0.18),
           ("fwd_bwd", "mod/dense", 0.20),
           ("forward", "speedup vs compile", 2.0),
           ("fwd_bwd", "speedup vs compile", 2.0))


def any_measured(*xs):
    return any(x is not None for x in xs)


def positive(x):
    """x, or None where a subtraction came out <= 0 (noise, not a time)."""
    return x if x is not None and x > 0 else None


def or_nothing(rows):
    return rows if rows else [["(nothing measured)"]]


def targets(T, extra_rows=()):
    head = ["target (bf16)", "d_model", "measured", "target", "met"]
    rows = []
    for what, check, bound in TARGETS:
        for d in T.ds:
            if check == "mod/dense":
                name = (f"ours: MoD block / dense block, "
                        f"{PASS_NAME[what]}")
                ours = T.diff("modc", "bf16", "mod", d, what)
                v = ratio(positive(ours),
                          T.diff("modc", "bf16", "dense", d, what))
                bound_s = f"<= {bound:.2f}x"
                met = None if v is None else v <= bound
                measured = "-" if v is None else f"{v:.3f}x"
            else:
                name = (f"ours vs torch.compile MoD block, "
                        f"{PASS_NAME[what]}: speed-up")
                v = ratio(T.get("torch_compile", "bf16", "block", "mod", d,
                                what),
                          T.diff("modc", "bf16", "mod", d, what))
                bound_s = f">= {bound:.1f}x"
                met = None if v is None else v >= bound
                measured = "-" if v is None else f"{v:.2f}x"
            rows.append([name, str(d), measured, bound_s,
                         "not measured" if met is None
                         else ("yes" if met else "**no**")])
    rows += list(extra_rows)
    text = ("### Targets (bf16; ours = model with the layer - model "
            "without, torch.compile = the layer alone)\n\n" +
            table(head, rows))
    if extra_rows:
        text += ("\n\nThe GEMM and routing rows come from the per-kernel "
                 "profile (CUDA events between the kernel groups; see the two "
                 "tables at the end).")
    return text


# ----------------------------------------------------------------------------
# The per-kernel profile (MODC_PROFILE=1): gathered GEMMs and routing
# ----------------------------------------------------------------------------

VOCAB = 256  # the models' vocabulary: the LM head is the GEMM with N = 256
GEMM_BOUND = 0.85  # ours / cuBLAS throughput, at least
ROUTING_BOUND = 0.10  # routing / MoD block time, at most
PROFILE_LINE = re.compile(
    r"^modc profile: kernel\s+(\d+) (.*?)\s+(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)"
    r" ms\s*$")
GEMM_NAME = re.compile(r"^modk\.gemm (\S+) \[(\d+)x(\d+)\](?:x(\d+))?$")
PROFILE_FILE = re.compile(r"^profile_mod_d(\d+)(_bf16)?\.txt$")
BACKWARD = ("grad", "cross_entropy", "bce_loss", "split_tokens")
ROUTING = "modk.route_select"


def parse_gemm(name):
    """(epilogue, N, K, weights) of a "modk.gemm EPILOGUE [NxK](xW)" name,
    else None."""
    m = GEMM_NAME.match(name)
    if not m:
        return None
    return m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)


def profile_calls(path):
    """The entry calls of a profile file, each [(index, name, ms)]."""
    calls = []
    with open(path, errors="replace") as f:
        for line in f:
            m = PROFILE_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            i, name, ms = int(m.group(1)), m.group(2).strip(), float(m.group(3))
            if not calls or i == 0 or i <= calls[-1][-1][0]:
                calls.append([])
            calls[-1].append((i, name, ms))
    return calls


def is_complete_forward(call):
    last = parse_gemm(call[-1][1]) if call else None
    return last is not None and last[1] == VOCAB


def forward_block(calls):
    """(block kernels, which call) of the last complete leading forward
    call, or (None, why not). See the header for the rules."""
    if not calls:
        return None, "no 'modc profile' lines"
    forwards = []
    for call in calls:
        if any(b in name for _, name, _ in call for b in BACKWARD):
            break
        forwards.append(call)
    if not forwards:
        return None, "no forward pass in the profile"
    complete = [n for n, c in enumerate(forwards) if is_complete_forward(c)]
    if not complete:
        return None, "no complete forward pass (none ends in the LM head)"
    call = forwards[complete[-1]]
    which = f"forward call {complete[-1] + 1} of {len(forwards)}"
    start = 0
    while start < len(call) and call[start][1] in ("modk.embed",
                                                  "modk.identity_rows"):
        start += 1
    end = len(call) - 1  # the LM head
    # The final norm: a generated row kernel ("modk.rows modc_rows_N").
    if end > start and call[end - 1][1].split()[0] in ("modk.rmsnorm",
                                                      "modk.rows"):
        end -= 1  # the final norm
    else:
        return None, "no final modk.rmsnorm before the LM head"
    block = call[start:end]
    if not block:
        return None, "the forward pass has no layer kernels"
    return block, which


class Profiles:
    """What report.py takes from profile_mod_dN[_bf16].txt."""

    def __init__(self, folder):
        self.block = {}  # (dtype, d) -> block kernels
        self.which = {}  # (dtype, d) -> which forward call they come from
        self.why = {}  # (dtype, d) -> why there is no block
        self.files = []
        if not folder or not os.path.isdir(folder):
            return
        for path in sorted(glob.glob(os.path.join(folder, "profile_mod_d*.txt"))):
            m = PROFILE_FILE.match(os.path.basename(path))
            if not m:
                continue
            key = ("bf16" if m.group(2) else "f32", int(m.group(1)))
            self.files.append(os.path.basename(path))
            try:
                block, why = forward_block(profile_calls(path))
            except OSError as e:
                block, why = None, f"unreadable: {e}"
            if block is None:
                self.why[key] = f"{os.path.basename(path)}: {why}"
            else:
                self.block[key], self.which[key] = block, why

    def ds(self):
        return sorted({d for _, d in list(self.block) + list(self.why)})


def gemm_rows(T, P, dt, d):
    """Per GEMM of the routed block: (index, name, M, N, K, W, ours ms, cuBLAS ms
    for all W weights or None); and a reason where there is nothing."""
    block = P.block.get((dt, d))
    if block is None:
        return None, P.why.get((dt, d), "no profile")
    if (dt, d) in T.mod_rows:
        b, k = T.mod_rows[(dt, d)]
        M = b * k
    else:
        ms = {key[2] for key in T.cublas if key[:2] == (dt, d)}
        if len(ms) != 1:
            return None, "no M (no modc mod row, no single cuBLAS M)"
        M = ms.pop()
    rows = []
    for i, name, t in block:
        g = parse_gemm(name)
        if g is None:
            continue
        _, N, K, W = g
        cb = T.cublas.get((dt, d, M, N, K))
        rows.append((i, name, M, N, K, W, t, None if cb is None else cb * W))
    if not rows:
        return None, "no modk.gemm line in the block"
    return rows, None


def gemm_overall(rows):
    """cuBLAS time / ours over the GEMMs with both, and how many had both."""
    both = [(t, cb) for *_, t, cb in rows if cb is not None and t > 0]
    if not both:
        return None, 0
    return sum(cb for _, cb in both) / sum(t for t, _ in both), len(both)


def routing_share(P, dt, d):
    block = P.block.get((dt, d))
    if block is None:
        return None, None, None
    # Each modk.route_select line and the gather + RMSNorm after it (the
    # modk.rows that modk-generalize puts right after it).
    route = sum(t for n, (_, name, t) in enumerate(block)
                if name.startswith(ROUTING) or
                (n > 0 and block[n - 1][1].startswith(ROUTING) and
                 name.startswith("modk.rows")))
    total = sum(t for _, _, t in block)
    if total <= 0 or not any(name.startswith(ROUTING) for _, name, _ in block):
        return None, route, total
    return route / total, route, total


def tflops(M, N, K, W, ms):
    return None if not ms or ms <= 0 else 2.0 * M * N * K * W / ms / 1e9


def met_cell(met):
    return "not measured" if met is None else ("yes" if met else "**no**")


def profile_targets(T, P, ds):
    """The targets table's rows for (a) and (b), in bf16."""
    rows = []
    for d in ds:
        rows_, _ = gemm_rows(T, P, "bf16", d)
        v, n = gemm_overall(rows_) if rows_ else (None, 0)
        note = "" if not rows_ or n == len(rows_) else f" ({n} of {len(rows_)} GEMMs)"
        met = met_cell(None if v is None else v >= GEMM_BOUND)
        rows.append(["ours: gathered GEMMs / cuBLAS at the same shapes, "
                     "forward, throughput (time-weighted; profile)", str(d),
                     "-" if v is None else f"{v:.2f}x{note}",
                     f">= {GEMM_BOUND:.2f}x",
                     met + " (partial)" if note and v is not None else met])
    for d in ds:
        share, _, _ = routing_share(P, "bf16", d)
        rows.append(["ours: routing (router + select + gather) / MoD block, "
                     "forward (profile)", str(d),
                     "-" if share is None else f"{100 * share:.1f} %",
                     f"<= {100 * ROUTING_BOUND:.0f} %",
                     met_cell(None if share is None
                              else share <= ROUTING_BOUND)])
    return rows


PROFILE_NOTE = (
    "Ours from the per-kernel profile (MODC_PROFILE=1, the timed forward "
    "pass of profile_mod_dN[_bf16].txt): CUDA events between the kernel "
    "groups, with no host wait, but each group starts with its launch, so "
    "short kernels look a little slower than they are.")
GEMM_NOTE = (
    " cuBLAS is timed with CUDA events over a CUDA graph of back-to-back "
    "calls (torch_gpu.py), operands in L2, so ours/cuBLAS is on the low "
    "side, most for the short d x d GEMMs. Our bf16 forward GEMMs on sm_90a "
    "read bf16 operands through TMA as cuBLAS bf16 reads bf16 (activations "
    "stored as bf16, bf16 copies of the weights) but most write f32; our "
    "f32 GEMMs are 3xTF32, cuBLAS f32 is FP32 (TF32 off). A `rows` "
    "line includes its generated epilogue: SwiGLU in the up projection "
    "(the gate projection is the `none` line before it) and the gated "
    "scatter into the stream in the down projection.")
ROUTING_NOTE = (
    " The route_select line is the router logits and the top-k select; the "
    "modk.rows line after it is the gather, with the layer's first RMSNorm "
    "(of the k rows) fused into it; the scatter of the update back into the "
    "stream (a modk.rows after the last GEMM) is not counted as routing. A similar overhead on each "
    "of the block's lines pulls every share toward 1 / the number of lines "
    "(10: 1/10, so the verdict against 10 % barely moves); routing's line "
    "launches three or four kernels, a little more overhead than most.")


def gemm_table(T, P, ds):
    head = ["d_model", "dtype", "kernel", "M x N x K", "ours ms",
            "ours TFLOP/s", "cuBLAS ms", "cuBLAS TFLOP/s", "ours/cuBLAS",
            f">= {GEMM_BOUND:.2f}"]
    rows, missing = [], []
    for d in ds:
        for dt in DTYPES:
            rs, why = gemm_rows(T, P, dt, d)
            if rs is None:
                if (dt, d) in P.block or (dt, d) in P.why:
                    missing.append(f"- d_model {d} {dt}: {why}")
                continue
            for i, name, M, N, K, W, t, cb in rs:
                v = ratio(cb, t)
                rows.append([str(d), dt, f"{i}: {name}",
                             f"{M} x {N} x {K}" + (f" (x{W})" if W > 1 else ""),
                             fmt(t, 4), fmt(tflops(M, N, K, W, t), 1),
                             fmt(cb, 4), fmt(tflops(M, N, K, W, cb), 1),
                             fmt(v, 2),
                             met_cell(None if v is None else v >= GEMM_BOUND)])
            v, n = gemm_overall(rs)
            t_all = sum(r[6] for r in rs if r[7] is not None)
            cb_all = sum(r[7] for r in rs if r[7] is not None)
            met = met_cell(None if v is None else v >= GEMM_BOUND)
            rows.append([str(d), dt, f"**all** ({n} of {len(rs)} with cuBLAS)",
                         "", fmt(t_all if n else None, 4), "",
                         fmt(cb_all if n else None, 4), "", fmt(v, 2),
                         met + " (partial)" if 0 < n < len(rs) else met])
    if (rows or P.files) and not T.cublas:
        missing.append("- no cuBLAS lines (torch_gpu.py --parts gemm)")
    return profile_section(
        P, "Gathered GEMMs of the routed layer vs cuBLAS, forward (ours from "
        "the per-kernel profile; ratio = throughput, ours / cuBLAS)", head,
        rows, GEMM_NOTE, missing)


def profile_section(P, title, head, rows, note, missing):
    """A table from the per-kernel profiles: a placeholder row where there
    are no profile files, the shared profile note and the table's own, then
    why any d_model and dtype is missing."""
    if not rows and not P.files:
        rows = [["(no profile_mod_d*.txt: run.sh with PROFILE=1)"]]
    text = (f"### {title}\n\n" + table(head, or_nothing(rows)) + "\n\n" +
            PROFILE_NOTE + note)
    if missing:
        text += "\n\n" + "\n".join(missing)
    return text


def routing_table(P, ds):
    head = ["d_model", "dtype", "routing ms", "MoD block ms", "share",
            f"<= {100 * ROUTING_BOUND:.0f} %", "block kernels counted"]
    rows, missing = [], []
    for d in ds:
        for dt in DTYPES:
            block = P.block.get((dt, d))
            if block is None:
                if (dt, d) in P.why:
                    missing.append(f"- d_model {d} {dt}: {P.why[(dt, d)]}")
                continue
            share, route, total = routing_share(P, dt, d)
            rows.append([str(d), dt, fmt(route, 4), fmt(total, 4),
                         "-" if share is None else f"{100 * share:.1f} %",
                         met_cell(None if share is None
                                  else share <= ROUTING_BOUND),
                         f"{block[0][0]}-{block[-1][0]} ({len(block)}) of "
                         f"{P.which[(dt, d)]}"])
    return profile_section(
        P, "Routing's share of the MoD block, forward (per-kernel profile: "
        "modk.route_select and its gather / the block's kernels, i.e. the forward's "
        "kernels less embed, identity_rows, final norm and LM head)", head,
        rows, ROUTING_NOTE, missing)


def twin_table(T, impl, title, names):
    """The bf16 MoD block of our sm_90a packages ("modc") against their
    twins compiled with other --cuda-gemms choices (impl): [] without
    lines of impl, else the one section. names: the two columns and their
    ratio."""
    rows = []
    for d in T.ds:
        for w in WHATS:
            ours = T.diff("modc", "bf16", "mod", d, w)
            twin = T.diff(impl, "bf16", "mod", d, w)
            if twin is None:
                continue
            rows.append([str(d), w, fmt(ours), fmt(twin),
                         fmt(ratio(ours, twin), 2)])
    if not rows:
        return []
    return ["### bf16 MoD block on sm_90a: " + title + "\n\n" +
            table(["d_model", "pass"] + names, rows)]


def cutlass_table(T):
    """The bf16 MoD block on CUTLASS (--cuda-gemms=cutlass, "modc_cutlass")
    against torch.compile: [] without such lines, else the one section,
    with the issue's targets (<= 0.75 forward at d 2048, <= 0.5 at d 1024;
    <= 0.5 forward+backward)."""
    rows = []
    for d in T.ds:
        for w in WHATS:
            ours = T.diff("modc_cutlass", "bf16", "mod", d, w)
            c = T.get("torch_compile", "bf16", "block", "mod", d, w)
            if ours is None or c is None:
                continue
            target = 0.75 if (w == "forward" and d >= 2048) else 0.5
            r = ratio(ours, c)
            rows.append([str(d), w, fmt(ours), fmt(c), fmt(r, 2),
                         f"<= {target}",
                         "met" if r is not None and r <= target else "MISSED"])
    if not rows:
        return []
    return ["### bf16 MoD block on sm_90a: CUTLASS's kernels against "
            "torch.compile (ms; ratio < 1: ours faster)\n\n" +
            table(["d_model", "pass", "CUTLASS", "compile", "CUTLASS/compile",
                   "target", ""], rows)]


def attention_table(T):
    """The bf16 MoD and dense blocks with the forward attention on mma.sync
    ("modc") and on TMA and wgmma ("modc_attnwg", --cuda-gemms='tiles
    attention=wgmma'): [] without such lines, else the one section."""
    rows = []
    for d in T.ds:
        for kind in ("mod", "dense"):
            for w in WHATS:
                ours = T.diff("modc", "bf16", kind, d, w)
                twin = T.diff("modc_attnwg", "bf16", kind, d, w)
                if ours is None or twin is None:
                    continue
                rows.append([str(d), kind, w, fmt(ours), fmt(twin),
                             fmt(ratio(ours, twin), 2)])
    if not rows:
        return []
    return ["### bf16 blocks on sm_90a: attention's forward on mma.sync "
            "against TMA and wgmma (ms; --cuda-gemms='tiles attention=wgmma'; "
            "> 1: wgmma faster)\n\n" +
            table(["d_model", "block", "pass", "mma.sync", "wgmma",
                   "mma.sync/wgmma"], rows)]


DECODE_GRAPH_BOUND = 0.8  # our decode step / PyTorch's CUDA graph, at most
DECODE_MOD_BOUND = 1.5  # dense step / MoD step at batch 1, at least
DECODE_TARGET_BATCHES = (1, 64)


def decode_batch_table(T):
    """The issue's decode targets, bf16 (17. in the header): at each batch of
    the decode lines (run.sh's DECODE_BATCHES and BATCH), the whole model's
    step, ours against PyTorch's CUDA graph, and the MoD model's speed-up
    over the dense one; [] without decode lines at a batch of
    DECODE_TARGET_BATCHES."""
    batches = sorted({k[4] for k in T.decode_sweep
                      if k[1] == "bf16" and k[0] == "modc"})
    if not any(b in DECODE_TARGET_BATCHES for b in batches):
        return []
    rows = []
    for d in T.ds:
        for b in batches:
            def step(impl, kind):
                return T.decode_sweep.get((impl, "bf16", kind, d, b))
            for kind in ("dense", "mod"):
                ours, e = step("modc", kind), step("torch_eager", kind)
                g = step("torch_cudagraph", kind)
                if not any_measured(ours, e, g):
                    continue
                v = ratio(ours, g)
                targeted = b in DECODE_TARGET_BATCHES
                rows.append([str(d), str(b), f"{kind} model, ms",
                             fmt(ours, 4), fmt(e, 4), fmt(g, 4),
                             fmt(v, 2),
                             f"<= {DECODE_GRAPH_BOUND}" if targeted else "",
                             met_cell(None if v is None else
                                      v <= DECODE_GRAPH_BOUND)
                             if targeted else ""])
            speedups = [ratio(step(impl, "dense"), step(impl, "mod"))
                        for impl in ("modc", "torch_eager", "torch_cudagraph")]
            if not any_measured(*speedups):
                continue
            targeted = b == DECODE_TARGET_BATCHES[0]
            rows.append([str(d), str(b), "dense / MoD (speed-up)"] +
                        [fmt(x, 2) for x in speedups] + [
                        "",
                        f">= {DECODE_MOD_BOUND}" if targeted else "",
                        met_cell(None if speedups[0] is None else
                                 speedups[0] >= DECODE_MOD_BOUND)
                        if targeted else ""])
    if not rows:
        return []
    return ["### bf16 decode step at the targets' batches (whole 1-layer "
            "model, after a prefill of S/2; ours/graph <= "
            f"{DECODE_GRAPH_BOUND} at batch 1 and 64, and our MoD model "
            f">= {DECODE_MOD_BOUND}x faster than our dense one at batch 1)"
            "\n\n" +
            table(["d_model", "batch", "measure", "ours", "eager", "graph",
                   "ours/graph", "target", "met"], rows)]


TRAIN_COMPILE_SPEEDUP = 1.5  # torch.compile's step / ours (bf16 MoD model)


def train_table(T):
    """The whole model's training step (18. in the header): [] without
    "train" lines. Both sides run the same global batch, so the ratio of
    times is the ratio of tokens per second."""
    rows = []
    for dt in ("bf16", "f32"):
        for d in T.ds:
            for kind, impl in (("dense", "modc"), ("mod", "modc"),
                               ("mod", "modc_cutlass")):
                def step(impl):
                    return T.get(impl, dt, "model", kind, d, "train")
                ours, e, c = step(impl), step("torch_eager"), \
                    step("torch_compile")
                if impl != "modc" and ours is None:
                    continue  # no --cuda-gemms=cutlass twin
                if not any_measured(ours, e, c):
                    continue
                speedup = ratio(c, ours)
                targeted = dt == "bf16" and kind == "mod"
                label = kind + (", CUTLASS" if impl == "modc_cutlass" else "")
                rows.append([str(d), dt, label, fmt(ours), fmt(e), fmt(c),
                             fmt(ratio(e, ours), 2), fmt(speedup, 2),
                             f">= {TRAIN_COMPILE_SPEEDUP}" if targeted else "",
                             met_cell(None if speedup is None else
                                      speedup >= TRAIN_COMPILE_SPEEDUP)
                             if targeted else ""])
    if not rows:
        return []
    return ["### Whole 1-layer model, one training step (forward, backward "
            "and AdamW; ms; speed-up = PyTorch's time / ours, the same global "
            f"batch; target: the bf16 MoD model >= {TRAIN_COMPILE_SPEEDUP}x "
            "torch.compile's tokens/s)\n\n" +
            table(["d_model", "dtype", "model", "ours", "eager", "compile",
                   "eager/ours", "compile/ours", "target", "met"], rows)]


def each_fusion_table(T):
    """The bf16 MoD model ("modc") against its twins compiled with one
    fusion left out ("modc_no-FUSION"): [] without such lines, else the one
    section. Whole models, so nothing is subtracted: a fusion that also
    touches the embedding or the head counts there too."""
    prefix = "modc_no-"
    impls = sorted({k[0] for k in T.t if k[0].startswith(prefix)})
    rows = []
    for d in T.ds:
        for impl in impls:
            for w in ("forward", "fwd_bwd", "decode"):
                ours = T.get("modc", "bf16", "model", "mod", d, w)
                without = T.get(impl, "bf16", "model", "mod", d, w)
                if without is None:
                    continue
                rows.append([str(d), impl[len(prefix):], w, fmt(ours, 4),
                             fmt(without, 4), fmt(ratio(ours, without), 2)])
    if not rows:
        return []
    return ["### bf16 MoD model with each fusion left out alone (ms, whole "
            "model; --no-fuse=FUSION; < 1: the fusion pays)\n\n" +
            table(["d_model", "fusion left out", "pass", "every fusion",
                   "without it", "every/without"], rows)]


MODE_BOUND = 0.6  # MoDE MLP / the same MLP without no-op experts, at most
MODE_TORCH_BOUNDS = {"eager": 1.5, "compile": 1.2}  # PyTorch / ours, at least


def shares_cell(s):
    if not s:
        return "-"
    return (f"{100 * s['kept']:.1f} / {100 * s['noop']:.1f} / "
            f"{100 * s['dropped']:.1f} %")


def mode_table(T):
    """The MoDE sublayer (16. in the header); [] without its lines."""
    ds = sorted({d for (kind, d) in T.moe_shares if kind == "moe_mode"} |
                {r.get("d_model") for r in T.torch_mode})
    rows, notes = [], []
    for d in ds:
        def mlp(kind, w):
            a = T.get("modc", "bf16", "model", f"moe_{kind}", d, w)
            stub = T.get("modc", "bf16", "model", "moe_stub", d, w)
            return None if a is None or stub is None else positive(a - stub)
        for w, tw in (("forward", "fwd"), ("fwd_bwd", "fwd+bwd")):
            mode, n0 = mlp("mode", w), mlp("n0", w)
            v = ratio(mode, n0)
            rows.append([f"MoDE MLP / MoE MLP (N = 0), {PASS_NAME[w]}",
                         str(d), fmt(mode), fmt(n0),
                         "-" if v is None else f"{v:.3f}x",
                         f"<= {MODE_BOUND}x", met_cell(
                             None if v is None else v <= MODE_BOUND)])
            for mode_name, bound in MODE_TORCH_BOUNDS.items():
                times = [r["ms"] for r in T.torch_mode
                         if r.get("d_model") == d and r.get("dtype") == "bf16"
                         and r.get("mode") == mode_name
                         and r.get("measure") == tw]
                best = min(times) if times else None
                x = ratio(best, mode)
                rows.append([f"PyTorch {mode_name} / ours, MoDE MLP, "
                             f"{PASS_NAME[w]}", str(d), fmt(mode), fmt(best),
                             "-" if x is None else f"{x:.2f}x",
                             f">= {bound}x",
                             met_cell(None if x is None else x >= bound)])
        theirs = next((r for r in T.torch_mode if r.get("d_model") == d
                       and "kept" in r), None)
        notes.append(f"d_model {d}: kept / no-op / dropped of the tokens: "
                     f"ours MoDE {shares_cell(T.moe_shares.get(('moe_mode', d)))}, "
                     f"ours N = 0 {shares_cell(T.moe_shares.get(('moe_n0', d)))}, "
                     f"PyTorch's MoDE {shares_cell(theirs)}")
    if not rows:
        return []
    return ["### MoDE: the MoE MLP with no-op experts (bf16; ours = the "
            "1-layer model minus the same layer with a width-1 dense MLP, "
            "ms; PyTorch = bench/torch_mode.py's sublayer, the faster of its "
            "two formulations)\n\n" +
            table(["measure", "d_model", "ours", "other", "ratio", "target",
                   "met"], rows) +
            "\n\nThe experts' products run on the tokens they keep, so the "
            "times hold for these routing decisions (fresh weights, random "
            "tokens):\n\n" + "\n".join(f"- {n}" for n in notes)]


def report(T, P=None):
    P = P if P is not None else Profiles(None)
    all_ds = sorted(set(T.ds) | set(P.ds()) | {k[1] for k in T.cublas})
    parts = [targets(T, profile_targets(T, P, all_ds))]
    for kind, title in (("mod", "MoD block"), ("dense", "Dense block")):
        head = ["d_model", "pass", "dtype", "ours", "eager", "compile",
                "ours/eager", "ours/compile"]
        rows = []
        for d in T.ds:
            for w in WHATS:
                for dt in DTYPES:
                    ours = T.diff("modc", dt, kind, d, w)
                    e = T.block("torch_eager", dt, kind, d, w)
                    c = T.get("torch_compile", dt, "block", kind, d, w)
                    if not any_measured(ours, e, c):
                        continue
                    rows.append([str(d), w, dt, fmt(ours), fmt(e), fmt(c),
                                 fmt(ratio(ours, e), 2),
                                 fmt(ratio(ours, c), 2)])
        parts.append(f"### {title}: forward and forward+backward (ms; ratio "
                     "< 1: ours faster; ours = model with the layer - model "
                     "without; PyTorch = the layer alone)\n\n" +
                     table(head, or_nothing(rows)))

    head = ["d_model", "block", "dtype", "ours", "eager", "graph",
            "ours/eager", "ours/graph"]
    rows = []
    for d in T.ds:
        for kind in ("mod", "dense"):
            for dt in DTYPES:
                ours = T.diff("modc", dt, kind, d, "decode")
                e = T.diff("torch_eager", dt, kind, d, "decode")
                g = T.diff("torch_cudagraph", dt, kind, d, "decode")
                if not any_measured(ours, e, g):
                    continue
                rows.append([str(d), kind, dt, fmt(ours, 4), fmt(e, 4),
                             fmt(g, 4), fmt(ratio(ours, e), 2),
                             fmt(ratio(ours, g), 2)])
    parts.append("### Decode step, B sequences, after a prefill of S/2 (ms; "
                 "block share = model - 0-layer model, both sides)\n\n" +
                 table(head, or_nothing(rows)))

    impls = [(f"{name} {dt}", impl, dt, only)
             for dt in DTYPES
             for name, impl, only in (("ours", "modc", None),
                                      ("eager", "torch_eager", None),
                                      ("compile", "torch_compile", None),
                                      ("graph", "torch_cudagraph", "decode"))]
    head = ["d_model", "pass"] + [n for n, *_ in impls]
    rows = []
    for d in T.ds:
        for w in ("forward", "fwd_bwd", "decode"):
            cells = [str(d), w]
            for _, impl, dt, only in impls:
                if only and only != w:
                    cells.append("-")
                    continue
                if impl == "modc" or w == "decode":
                    a = T.diff(impl, dt, "mod", d, w)
                    b = T.diff(impl, dt, "dense", d, w)
                else:
                    a = T.block(impl, dt, "mod", d, w)
                    b = T.block(impl, dt, "dense", d, w)
                cells.append(fmt(ratio(a, b), 3))
            rows.append(cells)
    parts.append("### MoD block / dense block, per implementation and dtype "
                 "(< 1: the routed layer is cheaper)\n\n" +
                 table(head, rows))

    head = ["d_model", "what", "pass", "ours f32", "ours bf16", "bf16/f32"]
    rows = []
    for d in T.ds:
        for kind, what in (("mod", "MoD block"), ("dense", "dense block"),
                           ("none", "0-layer model")):
            for w in ("forward", "fwd_bwd", "decode"):
                if kind == "none":
                    f = T.get("modc", "f32", "model", kind, d, w)
                    b = T.get("modc", "bf16", "model", kind, d, w)
                else:
                    f = T.diff("modc", "f32", kind, d, w)
                    b = T.diff("modc", "bf16", kind, d, w)
                if not any_measured(f, b):
                    continue
                rows.append([str(d), what, w, fmt(f, 4), fmt(b, 4),
                             fmt(ratio(b, f), 2)])
    parts.append("### Ours in bf16 against ours in f32 (ms; bf16 products on "
                 "bf16 tensor cores vs 3xTF32, f32 buffers in both)\n\n" +
                 table(head, or_nothing(rows)))

    head = ["d_model", "model", "pass", "dtype", "ours", "eager", "graph",
            "ours/eager", "ours/graph"]
    rows = []
    for d in T.ds:
        for kind in ("none", "dense", "mod"):
            for w in ("forward", "fwd_bwd", "decode"):
                for dt in DTYPES:
                    ours = T.get("modc", dt, "model", kind, d, w)
                    e = T.get("torch_eager", dt, "model", kind, d, w)
                    g = T.get("torch_cudagraph", dt, "model", kind, d, w)
                    if not any_measured(ours, e, g):
                        continue
                    rows.append([str(d), kind, w, dt, fmt(ours, 4),
                                 fmt(e, 4), fmt(g, 4),
                                 fmt(ratio(ours, e), 2),
                                 fmt(ratio(ours, g), 2)])
    parts.append("### Whole models (embedding, 0 or 1 layer, final norm, LM "
                 "head V=256), no subtraction (ms)\n\n" +
                 table(head, or_nothing(rows)))

    head = ["d_model", "block", "pass", "dtype", "eager model diff",
            "eager layer alone", "diff/alone"]
    rows = []
    for d in T.ds:
        for kind in ("mod", "dense"):
            for w in WHATS:
                for dt in DTYPES:
                    a = T.diff("torch_eager", dt, kind, d, w)
                    b = T.get("torch_eager", dt, "block", kind, d, w)
                    if a is None and b is None:
                        continue
                    rows.append([str(d), kind, w, dt, fmt(a), fmt(b),
                                 fmt(ratio(a, b), 2)])
    parts.append("### Check of the subtraction (PyTorch eager: model "
                 "difference vs the layer alone; the layer alone also "
                 "includes making its input gradient)\n\n" +
                 table(head, or_nothing(rows)))

    parts.append(gemm_table(T, P, all_ds))
    parts.append(routing_table(P, all_ds))

    parts += twin_table(
        T, "modc_mma", "products on wgmma against mma.sync (ms; "
        "--cuda-gemms='path=mma'; < 1: wgmma faster)",
        ["wgmma", "mma.sync", "wgmma/mma.sync"])
    parts += twin_table(
        T, "modc_notma", "wgmma fed by TMA against wgmma reading its operands "
        "(ms; --cuda-gemms='tma=false'; < 1: TMA faster)",
        ["TMA", "no TMA", "TMA/no TMA"])
    parts += twin_table(
        T, "modc_gather1", "the selection's fused gather on its configured "
        "blocks a sequence against one (ms; --cuda-gemms='gather-blocks=1'; "
        "< 1: the split pays)",
        ["configured", "one block", "configured/one"])
    parts += twin_table(
        T, "modc_cutlass", "the hand-written tiles against CUTLASS's "
        "kernels (ms; --cuda-gemms=cutlass; > 1: CUTLASS faster)",
        ["tiles", "CUTLASS", "tiles/CUTLASS"])
    parts += cutlass_table(T)
    parts += attention_table(T)

    rows = []
    for d in T.ds:
        for kind in ("none", "mod"):
            ours = T.get("modc", "bf16", "model", kind, d, "decode")
            tiles = T.get("modc_stream0", "bf16", "model", kind, d, "decode")
            if tiles is None:
                continue
            rows.append([str(d), kind, fmt(ours, 4), fmt(tiles, 4),
                         fmt(ratio(ours, tiles), 2)])
    if rows:
        parts.append("### bf16 decode step on sm_90a: few-row products on the "
                     "weight-streaming kernel against the tile kernels (ms, "
                     "whole model; --cuda-gemms='stream-rows=0'; < 1: the "
                     "few-row kernel pays)\n\n" +
                     table(["d_model", "model", "stream", "tiles",
                            "stream/tiles"], rows))

    rows = []
    for d in T.ds:
        for dt in ("f32", "bf16"):
            for w in WHATS:
                fused = T.diff("modc", dt, "mod", d, w)
                unfused = T.diff("modc_nofuse", dt, "mod", d, w)
                if unfused is None:
                    continue
                rows.append([str(d), dt, w, fmt(fused), fmt(unfused),
                             fmt(ratio(fused, unfused), 2)])
    if rows:
        parts.append("### MoD block with every epilogue fusion against none "
                     "(ms; --no-fuse=residual-add,activation,rows-epilogue,"
                     "router-norm,select-gather,copy; "
                     "< 1: the fusions pay)\n\n" +
                     table(["d_model", "dtype", "pass", "fused", "unfused",
                            "fused/unfused"], rows))
    parts += each_fusion_table(T)
    parts += mode_table(T)
    parts += decode_batch_table(T)
    parts += train_table(T)

    if T.errors:
        lines = []
        for r in T.errors:
            what = r.get("error") or "skipped: " + r.get("skipped", "")
            lines.append(f"- {r.get('impl')} {r.get('dtype')} {r.get('scope')} "
                         f"{r.get('kind')} d={r.get('d_model')} "
                         f"{r.get('what')}: {what}")
        parts.append("### Not measured\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(
        description="markdown tables of the GPU benchmark (see the header)")
    ap.add_argument("results", help="JSON lines of bench_gpu and torch_gpu.py")
    ap.add_argument("--profiles", metavar="DIR",
                    help="folder of profile_mod_d*.txt (default: the "
                         "results file's folder)")
    ap.add_argument("--batch", type=int,
                    help="the run's batch (default: the one most lines "
                         "have); decode lines at other batches fill only "
                         "the decode-targets table")
    a = ap.parse_args()
    T = Table(load(a.results), a.batch)
    P = Profiles(a.profiles if a.profiles is not None
                 else os.path.dirname(os.path.abspath(a.results)))
    if not T.t and not T.cublas and not P.block and not T.torch_mode:
        print("report.py: no measurements in " + a.results)
        return 1
    print(report(T, P))
    return 0


if __name__ == "__main__":
    sys.exit(main())
