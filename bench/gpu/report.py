#!/usr/bin/env python3
# ===- report.py - side-by-side tables of the GPU benchmark's JSON lines ---===#
#
# Reads the JSON lines of bench_gpu (impl "modc", f32) and torch_gpu.py
# (torch_eager, torch_compile, torch_cudagraph; bf16 and f32) and prints
# markdown tables, times in ms (medians):
#
#   1. The MoD block: ours (model with the routed layer minus the model with
#      no layer) beside PyTorch eager and torch.compile (the layer alone),
#      with the ratios ours / torch (< 1: ours is faster).
#   2. The same for the dense block (eager; compile only when timed).
#   3. The decode step, block share (model minus the 0-layer model), ours
#      beside PyTorch eager and CUDA-graph replay.
#   4. MoD / dense per implementation (< 1: routing pays).
#   5. Whole models, no subtraction: ours beside eager.
#   6. Check of the subtraction: PyTorch eager's model difference against its
#      layer timed alone (near 1 means the difference measures the block).
#
# Usage: report.py RESULTS.jsonl [--markdown-header TEXT]
#
# ===-----------------------------------------------------------------------===#

import json
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
    def __init__(self, rows):
        self.t = {}
        self.errors = [r for r in rows if "error" in r or "skipped" in r]
        for r in rows:
            if "median_ms" not in r:
                continue
            key = (r["impl"], r["dtype"], r.get("scope", "model"), r["kind"],
                   r["d_model"], r["what"])
            self.t[key] = r["median_ms"]
        self.ds = sorted({k[4] for k in self.t})

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
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def report(T):
    parts = []
    whats = ("forward", "fwd_bwd")
    for kind, title in (("mod", "MoD block"), ("dense", "Dense block")):
        head = ["d_model", "pass", "ours f32", "eager f32", "eager bf16",
                "compile f32", "compile bf16", "ours/eager f32",
                "ours/eager bf16", "ours/compile f32", "ours/compile bf16"]
        rows = []
        for d in T.ds:
            for w in whats:
                ours = T.diff("modc", "f32", kind, d, w)
                ef = T.block("torch_eager", "f32", kind, d, w)
                eb = T.block("torch_eager", "bf16", kind, d, w)
                cf = T.get("torch_compile", "f32", "block", kind, d, w)
                cb = T.get("torch_compile", "bf16", "block", kind, d, w)
                rows.append([str(d), w, fmt(ours), fmt(ef), fmt(eb), fmt(cf),
                             fmt(cb), fmt(ratio(ours, ef), 2),
                             fmt(ratio(ours, eb), 2), fmt(ratio(ours, cf), 2),
                             fmt(ratio(ours, cb), 2)])
        parts.append(f"### {title}: forward and forward+backward (ms; ratio < 1: ours faster; ours = "
                     "model with the layer - model without; PyTorch = the "
                     "layer alone)\n\n" + table(head, rows))

    head = ["d_model", "block", "ours f32", "eager f32", "graph f32",
            "eager bf16", "graph bf16", "ours/eager f32", "ours/graph f32",
            "ours/graph bf16"]
    rows = []
    for d in T.ds:
        for kind in ("mod", "dense"):
            ours = T.diff("modc", "f32", kind, d, "decode")
            ef = T.diff("torch_eager", "f32", kind, d, "decode")
            gf = T.diff("torch_cudagraph", "f32", kind, d, "decode")
            eb = T.diff("torch_eager", "bf16", kind, d, "decode")
            gb = T.diff("torch_cudagraph", "bf16", kind, d, "decode")
            rows.append([str(d), kind, fmt(ours, 4), fmt(ef, 4), fmt(gf, 4),
                         fmt(eb, 4), fmt(gb, 4), fmt(ratio(ours, ef), 2),
                         fmt(ratio(ours, gf), 2), fmt(ratio(ours, gb), 2)])
    parts.append("### Decode step, B sequences, after a prefill of S/2 (ms; "
                 "block share = model - 0-layer model, both sides)\n\n" +
                 table(head, rows))

    impls = [("ours f32", "modc", "f32", None),
             ("eager f32", "torch_eager", "f32", None),
             ("eager bf16", "torch_eager", "bf16", None),
             ("compile f32", "torch_compile", "f32", None),
             ("compile bf16", "torch_compile", "bf16", None),
             ("graph f32", "torch_cudagraph", "f32", "decode"),
             ("graph bf16", "torch_cudagraph", "bf16", "decode")]
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
    parts.append("### MoD block / dense block, per implementation (< 1: the "
                 "routed layer is cheaper)\n\n" + table(head, rows))

    head = ["d_model", "model", "pass", "ours f32", "eager f32", "eager bf16",
            "graph f32", "graph bf16", "ours/eager f32", "ours/eager bf16"]
    rows = []
    for d in T.ds:
        for kind in ("none", "dense", "mod"):
            for w in ("forward", "fwd_bwd", "decode"):
                ours = T.get("modc", "f32", "model", kind, d, w)
                ef = T.get("torch_eager", "f32", "model", kind, d, w)
                eb = T.get("torch_eager", "bf16", "model", kind, d, w)
                gf = T.get("torch_cudagraph", "f32", "model", kind, d, w)
                gb = T.get("torch_cudagraph", "bf16", "model", kind, d, w)
                if all(v is None for v in (ours, ef, eb)):
                    continue
                rows.append([str(d), kind, w, fmt(ours, 4), fmt(ef, 4),
                             fmt(eb, 4), fmt(gf, 4), fmt(gb, 4),
                             fmt(ratio(ours, ef), 2), fmt(ratio(ours, eb), 2)])
    parts.append("### Whole models (embedding, 0 or 1 layer, final norm, LM "
                 "head V=256), no subtraction (ms)\n\n" + table(head, rows))

    head = ["d_model", "block", "pass", "dtype", "eager model diff",
            "eager layer alone", "diff/alone"]
    rows = []
    for d in T.ds:
        for kind in ("mod", "dense"):
            for w in whats:
                for dt in ("f32", "bf16"):
                    a = T.diff("torch_eager", dt, kind, d, w)
                    b = T.get("torch_eager", dt, "block", kind, d, w)
                    if a is None and b is None:
                        continue
                    rows.append([str(d), kind, w, dt, fmt(a), fmt(b),
                                 fmt(ratio(a, b), 2)])
    parts.append("### Check of the subtraction (PyTorch eager: model "
                 "difference vs the layer alone; the layer alone also "
                 "includes making its input gradient)\n\n" + table(head, rows))

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
    if len(sys.argv) < 2:
        print("usage: report.py RESULTS.jsonl", file=sys.stderr)
        return 2
    T = Table(load(sys.argv[1]))
    if not T.t:
        print("report.py: no measurements in " + sys.argv[1])
        return 1
    print(report(T))
    return 0


if __name__ == "__main__":
    sys.exit(main())
