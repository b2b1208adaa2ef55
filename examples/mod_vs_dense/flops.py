#!/usr/bin/env python3
"""Training FLOPs per step of a modc model description (docs/mod-vs-dense.md).

    flops.py MODEL.json [--batch B]            print FLOPs per training step
    flops.py --iso DENSE.json MOD.json STEPS   MoD steps with the FLOPs of
                                               STEPS dense steps (rounded)

Forward FLOPs per sequence (2 per multiply-add), summed over layers, where a
layer processes n = seq_len rows when dense and n = k rows when routed:

    projections   2 * 4 * n * d^2                      (Q, K, V, O)
    attention     2 * 2 * n(n+1)/2 * d                 (QK^T and PV, causal half)
    MLP           2 * 3 * n * d * d_ff                 (SwiGLU; 2 for GELU)
    router        2 * S * d                            (routed layers, all S rows)
    predictor     2 * S * (d*h + h)                    (causal_router predictor)
plus the LM head 2 * S * d * V. A training step costs 3x the forward
(backward = two matmuls per forward matmul), times the batch.
"""
import json
import math
import sys


def config(path):
    with open(path) as f:
        c = json.load(f)
    S, L = c["seq_len"], c["n_layers"]
    routed, k, pred_h = [False] * L, S, 0
    mod = c.get("mod")
    if mod is not None:
        if "capacity_tokens" in mod:
            k = int(mod["capacity_tokens"])
        else:
            k = int(math.ceil(mod.get("capacity", 0.125) * S))
        k = max(1, min(S, k))
        sched = mod.get("schedule", "every_other")
        if isinstance(sched, list):
            routed = [l in sched for l in range(L)]
        else:
            routed = [{"every_other": l % 2 == 1, "all": True,
                       "none": False}[sched] for l in range(L)]
        if mod.get("causal_router", "none") == "predictor":
            pred_h = mod.get("predictor_hidden", c["d_model"])
    return c, routed, k, pred_h


def forward_flops_per_seq(path):
    c, routed, k, h = config(path)
    d, ff, S, V = c["d_model"], c["d_ff"], c["seq_len"], c["vocab_size"]
    mlp = 3 if c.get("mlp", "swiglu") == "swiglu" else 2
    total = 0.0
    for r in routed:
        n = k if r else S
        total += 2 * 4 * n * d * d
        total += 2 * 2 * (n * (n + 1) / 2) * d
        total += 2 * mlp * n * d * ff
        if r:
            total += 2 * S * d
            if h:
                total += 2 * S * (d * h + h)
    total += 2 * S * d * V
    return total


def train_flops_per_step(path, batch):
    return 3.0 * forward_flops_per_seq(path) * batch


def main(argv):
    if argv and argv[0] == "--iso":
        dense, mod, steps = argv[1], argv[2], int(argv[3])
        ratio = forward_flops_per_seq(mod) / forward_flops_per_seq(dense)
        print(int(round(steps / ratio)))
        return 0
    batch = 8
    if "--batch" in argv:
        batch = int(argv[argv.index("--batch") + 1])
    print("%.6e" % train_flops_per_step(argv[0], batch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
