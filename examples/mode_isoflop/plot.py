#!/usr/bin/env python3
"""Plots the runs of run.sh: held-out loss against training FLOPs, each
model's seeds and their mean, and each run's final held-out loss, from
OUT/<model>.s<seed>.csv (modrun train --log), OUT/<model>.s<seed>.json
(../mod_vs_dense/summarize.py) and OUT/<model>.s<seed>.log (modrun's
report: the MoE layers' shares at the last evaluation). Writes OUT/loss.png
and prints Markdown tables.

Usage: plot.py OUT_DIR        (needs matplotlib: pip install matplotlib)
"""
import collections
import csv
import glob
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODELS = {"dense": ("dense", "tab:blue"), "mod": ("MoD", "tab:orange"),
          "moe": ("MoE", "tab:purple"),
          "mode-integrated": ("integrated MoDE", "tab:green"),
          "mode-staged": ("staged MoDE", "tab:red")}
SHARE = re.compile(r"moe layer (\d+): kept ([\d.]+) %, no-op ([\d.]+) %, "
                   r"dropped ([\d.]+) %")


def evals(out_dir, run):
    rows = csv.DictReader(open(os.path.join(out_dir, run + ".csv")))
    return [(int(r["step"]), float(r["eval_loss"])) for r in rows
            if r["eval_loss"]]


def last_shares(out_dir, run):
    """{layer: (kept, no-op, dropped) %} at the run's last report."""
    path = os.path.join(out_dir, run + ".log")
    shares = {}
    if os.path.exists(path):
        for m in SHARE.finditer(open(path).read()):
            shares[int(m.group(1))] = tuple(float(g) for g in m.groups()[1:])
    return shares


def main(out_dir):
    runs = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(out_dir, "*.s*.json"))):
        r = json.load(open(path))
        runs[r["run"].rsplit(".s", 1)[0]].append(r)
    models = [m for m in MODELS if m in runs]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8),
                             gridspec_kw={"width_ratios": [2, 1]})
    for i, m in enumerate(models):
        name, color = MODELS[m]
        curves = []
        for r in runs[m]:
            ev = evals(out_dir, r["run"])
            fps = r["flops_per_step"] / 1e12
            axes[0].plot([s * fps for s, _ in ev], [e for _, e in ev], "-",
                         color=color, alpha=0.35, lw=1)
            curves.append(ev)
            axes[1].plot([i], [r["final_eval_loss"]], "o", color=color, ms=6)
        # The mean over seeds at the evaluations every seed has.
        n = min(len(c) for c in curves)
        fps = runs[m][0]["flops_per_step"] / 1e12
        mean = [statistics.mean(c[j][1] for c in curves) for j in range(n)]
        axes[0].plot([curves[0][j][0] * fps for j in range(n)], mean, "o-",
                     color=color, ms=3, lw=1.8,
                     label=f"{name} (mean of {len(curves)} seeds)")
        axes[1].plot([i - 0.25, i + 0.25], [mean[-1]] * 2, "-", color=color,
                     lw=2)
    axes[0].set_xlabel("training TFLOPs (3x forward, capacity budget)")
    axes[0].set_ylabel("held-out cross-entropy (nats/byte)")
    axes[0].set_title("held-out loss vs training FLOPs")
    axes[0].set_ylim(1.6, 2.6)
    axes[0].legend(fontsize=8)
    axes[1].set_xticks(range(len(models)))
    axes[1].set_xticklabels([MODELS[m][0] for m in models], rotation=30,
                            ha="right", fontsize=8)
    axes[1].set_title("final held-out loss (dots: seeds, bar: mean)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("modc: dense vs MoD vs MoE vs MoDE at equal training FLOPs, "
                 "d_model 128, 4 layers, fortunes corpus (bytes)")
    fig.tight_layout()
    png = os.path.join(out_dir, "loss.png")
    fig.savefig(png, dpi=110)
    print(f"wrote {png}", file=sys.stderr)

    dense = runs.get("dense")
    base = (statistics.mean(r["final_eval_loss"] for r in dense)
            if dense else None)
    print("| model | steps | tokens | training FLOPs | final held-out CE, "
          "per seed | mean | mean − dense | median tokens/s |")
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for m in models:
        rs = runs[m]
        mean = statistics.mean(r["final_eval_loss"] for r in rs)
        delta = f"{mean - base:+.4f}" if base is not None else ""
        per_seed = ", ".join(f"{r['final_eval_loss']:.4f}" for r in rs)
        print(f"| {MODELS[m][0]} | {rs[0]['steps']} | "
              f"{rs[0]['tokens'] / 1e6:.2f} M | "
              f"{rs[0]['train_flops'] / 1e12:.1f} T | {per_seed} | "
              f"{mean:.4f} | {delta} | "
              f"{statistics.median(r['median_tokens_per_s'] for r in rs):.0f} |")
    print()
    print("| run | MoE shares at the last evaluation: layer: kept / no-op / "
          "dropped % |")
    print("|---|---|")
    for m in models:
        for r in runs[m]:
            shares = last_shares(out_dir, r["run"])
            if shares:
                print(f"| {r['run']} | " + "; ".join(
                    f"{l}: {k:.1f} / {n:.1f} / {d:.1f}"
                    for l, (k, n, d) in sorted(shares.items())) + " |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
