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
#      forward + backward).
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
#
# Missing measurements print as "-" ("not measured" in the targets); rows
# with nothing measured at all are left out.
#
# Usage: report.py RESULTS.jsonl
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


def targets(T):
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
    return ("### Targets (bf16; ours = model with the layer - model "
            "without, torch.compile = the layer alone)\n\n" +
            table(head, rows))


def report(T):
    parts = [targets(T)]
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
