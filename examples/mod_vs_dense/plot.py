#!/usr/bin/env python3
"""Plots the runs of run.sh: training and held-out loss against step and
against training FLOPs, from OUT/<run>.csv (modrun train --log) and
OUT/<run>.json (summarize.py). Writes OUT/loss.png and prints a Markdown table.

Usage: plot.py OUT_DIR        (needs matplotlib: pip install matplotlib)
"""
import csv
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {"dense": "dense", "mod-steps": "MoD, same steps",
          "mod-flops": "MoD, same FLOPs"}
COLORS = {"dense": "tab:blue", "mod-steps": "tab:orange",
          "mod-flops": "tab:green"}


def smooth(values, window=50):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def main(out_dir):
    runs = [json.load(open(os.path.join(out_dir, r + ".json")))
            for r in LABELS if os.path.exists(os.path.join(out_dir, r + ".json"))]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for r in runs:
        rows = list(csv.DictReader(open(os.path.join(out_dir,
                                                     r["run"] + ".csv"))))
        step = [int(x["step"]) for x in rows]
        ce = smooth([float(x["ce"]) for x in rows])
        ev = [(int(x["step"]), float(x["eval_loss"])) for x in rows
              if x["eval_loss"]]
        fps = r["flops_per_step"] / 1e12  # TFLOP per step
        name, color = LABELS.get(r["run"], r["run"]), COLORS.get(r["run"])
        for ax, scale, xlabel in ((axes[0], 1.0, "step"),
                                  (axes[1], fps, "training TFLOPs")):
            ax.plot([s * scale for s in step], ce, color=color, alpha=0.45,
                    lw=1, label=f"{name}: train CE (50-step mean)")
            ax.plot([s * scale for s, _ in ev], [e for _, e in ev], "o-",
                    color=color, ms=3, lw=1.6, label=f"{name}: held-out CE")
            ax.set_xlabel(xlabel)
    axes[0].set_ylabel("cross-entropy (nats/byte)")
    axes[0].set_title("loss vs step (batch 8 x 256 bytes)")
    axes[1].set_title("loss vs training FLOPs (3x forward)")
    for ax in axes:
        ax.set_ylim(1.0, 3.2)
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle("modc: dense vs Mixture-of-Depths (12.5 %, every other "
                 "layer), d_model 128, 4 layers, fortunes corpus")
    fig.tight_layout()
    png = os.path.join(out_dir, "loss.png")
    fig.savefig(png, dpi=110)
    print(f"wrote {png}", file=sys.stderr)

    print("| run | steps | tokens | training FLOPs | wall time | tokens/s "
          "| final held-out CE | best held-out CE | train CE (last 50 steps) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {LABELS.get(r['run'], r['run'])} | {r['steps']} | "
              f"{r['tokens'] / 1e6:.2f} M | {r['train_flops'] / 1e12:.1f} T | "
              f"{r['wall_s']:.0f} s | {r['tokens'] / r['wall_s']:.0f} | "
              f"{r['final_eval_loss']:.4f} | {r['best_eval_loss']:.4f} | "
              f"{r['final_train_ce_last50']:.4f} |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
