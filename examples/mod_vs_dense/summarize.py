#!/usr/bin/env python3
"""Summary of one run of run.sh, one JSON object on stdout.

Usage: summarize.py RUN MODEL.json STEPS BATCH WALL_S LOAD_BEFORE LOAD_AFTER LOG.csv
"""
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flops import train_flops_per_step  # noqa: E402

run, model, n, batch, wall, lb, la, log = sys.argv[1:]
n, batch = int(n), int(batch)
with open(model) as f:
    seq = json.load(f)["seq_len"]
rows = list(csv.DictReader(open(log)))
evals = [float(r["eval_loss"]) for r in rows if r["eval_loss"]]
last = rows[-50:]
print(json.dumps({
    "run": run, "model": os.path.basename(model), "steps": n, "batch": batch,
    "tokens": n * batch * seq,
    "train_flops": n * train_flops_per_step(model, batch),
    "flops_per_step": train_flops_per_step(model, batch),
    "wall_s": float(wall),
    "final_eval_loss": evals[-1], "best_eval_loss": min(evals),
    "final_train_ce_last50": sum(float(r["ce"]) for r in last) / len(last),
    "median_tokens_per_s": sorted(float(r["tokens_per_s"]) for r in rows)[len(rows) // 2],
    "max_tokens_per_s": max(float(r["tokens_per_s"]) for r in rows),
    "load_before": lb, "load_after": la}))
