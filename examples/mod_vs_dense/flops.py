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
plus the LM head 2 * S * d * V. A layer whose MLP is a Mixture of Experts
(the `moe` key, docs/model-format.md section 7) replaces the MLP term with

    MoE router    2 * n * d * (E+N)
    experts       2 * 3 * R * d * d_expert             (2 for GELU)

where R = min(n, E * C) is the most rows its real experts can keep, with
C = clamp(ceil(capacity_factor * n / (E+N)), 1, n): the static budget the
capacity sets, not the rows an actual batch keeps. A training step costs 3x
the forward (backward = two matmuls per forward matmul), times the batch.
"""
import json
import math
import sys


def scheduled(sched, L, default):
    """The layers a `schedule` value names (docs/model-format.md)."""
    sched = default if sched is None else sched
    if isinstance(sched, list):
        return [l in sched for l in range(L)]
    return [{"every_other": l % 2 == 1, "all": True, "none": False}[sched]
            for l in range(L)]


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
        routed = scheduled(mod.get("schedule"), L, "every_other")
        if mod.get("causal_router", "none") == "predictor":
            pred_h = mod.get("predictor_hidden", c["d_model"])
    return c, routed, k, pred_h


def mlp_flops(c, layer, n):
    """Forward FLOPs of layer's MLP sublayer on n rows a sequence."""
    d = c["d_model"]
    mlp = 3 if c.get("mlp", "swiglu") == "swiglu" else 2
    moe = c.get("moe")
    if moe is None or not scheduled(moe.get("schedule"), c["n_layers"],
                                    "all")[layer]:
        return 2 * mlp * n * d * c["d_ff"]
    E, N = moe["n_experts"], moe.get("noop_experts", 0)
    C = max(1, min(n, math.ceil(moe.get("capacity_factor", 1.0) * n / (E + N))))
    return 2 * n * d * (E + N) + 2 * mlp * min(n, E * C) * d * moe["d_expert"]


def forward_flops_per_seq(path):
    c, routed, k, h = config(path)
    d, S, V = c["d_model"], c["seq_len"], c["vocab_size"]
    total = 0.0
    for layer, r in enumerate(routed):
        n = k if r else S
        total += 2 * 4 * n * d * d
        total += 2 * 2 * (n * (n + 1) / 2) * d
        total += mlp_flops(c, layer, n)
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
