#!/usr/bin/env python3
"""The data-parallel scaling model of docs/distributed.md: computed, not measured.

For each model (a model JSON of bench/models), from its parameter count and
FLOPs per sequence, and from stated link bandwidths and GPU throughput:

  gradient bytes G    = 4 x parameters (f32: what modrt's reduction sends,
                        and what an f32 NCCL all-reduce sends)
  all-reduce time     = 2 (P-1)/P x G / bus bandwidth (ring, or reduce-scatter
                        + all-gather, as reduceGradients does)
  compute time        = 3 x forward FLOPs x sequences per GPU / throughput
                        (forward = the FLOP formula of bench/BenchCommon.h;
                        backward = 2 x forward)
  no overlap:   step  = compute + all-reduce
  overlap:      step  = forward + max(backward, all-reduce)
  efficiency          = compute / step (the fraction of the GPU's time that
                        computes; 1 = linear scaling)
  host staging        = (5 + 1/P) x G / PCIe bandwidth: the copies of
                        modrt's path as built today (docs/distributed.md)

Nothing here runs a model or a network. Usage:

  bench/scaling_model.py [--batch-per-gpu 8,32] [--tflops 400]
                         [--models bench/models/model_dense.json,...]
"""
import argparse
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, ranks, bus bandwidth per GPU per direction, bytes/s)
LINKS = [
    ("8 x H100 SXM, NVLink (450 GB/s)", 8, 450e9),
    ("64 x H100, InfiniBand NDR 400 Gb/s per GPU (50 GB/s)", 64, 50e9),
]
PCIE = 64e9  # PCIe Gen5 x16, per direction, nominal


def params(m):
    """Parameter count of a model JSON, as the manifest lists the tensors."""
    d, ff, V, L = m["d_model"], m["d_ff"], m["vocab_size"], m["n_layers"]
    swiglu = m.get("mlp", "swiglu") == "swiglu"
    layer = 2 * d + 4 * d * d + (3 if swiglu else 2) * d * ff
    n = L * layer + d + V * d  # final norm, embedding
    if not m.get("tie_embeddings", True):
        n += V * d
    mod = m.get("mod")
    if mod:
        routed = routed_layers(m)
        per = d  # router
        if mod.get("causal_router") == "predictor":
            h = mod.get("predictor_hidden", 128)
            per += d * h + h + h + 1
        n += len(routed) * per
    return n


def routed_layers(m):
    mod = m.get("mod")
    if not mod:
        return []
    schedule = mod.get("schedule", "every_other")
    L = m["n_layers"]
    if schedule == "all":
        return list(range(L))
    if schedule == "every_other":
        return [i for i in range(L) if i % 2 == 1]
    raise SystemExit(f"scaling_model.py: schedule {schedule} not modelled")


def forward_flops(m):
    """bench/BenchCommon.h's forwardFlops, for one sequence."""
    d, ff, V, S = m["d_model"], m["d_ff"], m["vocab_size"], m["seq_len"]
    swiglu = m.get("mlp", "swiglu") == "swiglu"
    routed = routed_layers(m)
    total = 0.0
    for i in range(m["n_layers"]):
        n = S
        if i in routed:
            n = max(1, int(m["mod"]["capacity"] * S))
        total += 2 * 4 * n * d * d
        total += 2 * 2 * (n * (n + 1) / 2) * d
        total += 2 * (3 if swiglu else 2) * n * d * ff
        if i in routed:
            total += 2 * S * d
    total += 2 * S * d * V
    return total


def ms(x):
    return f"{1e3 * x:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(
        os.path.join(HERE, "models", f"{n}.json")
        for n in ("model_dense", "model_mod")))
    ap.add_argument("--batch-per-gpu", default="8,32",
                    help="sequences per GPU per step, comma-separated")
    ap.add_argument("--tflops", type=float, default=400.0,
                    help="sustained dense bf16 throughput per GPU, TFLOP/s")
    a = ap.parse_args()
    flops = a.tflops * 1e12
    batches = [int(b) for b in a.batch_per_gpu.split(",")]

    print("| model | parameters | f32 gradient bytes G | training GFLOP per "
          "sequence |")
    print("|---|---:|---:|---:|")
    models = []
    for path in a.models.split(","):
        with open(path) as f:
            m = json.load(f)
        n = params(m)
        fl = 3 * forward_flops(m)
        models.append((m, n, fl))
        print(f"| {m['name']} | {n:,} | {4 * n:,} ({4 * n / 2**20:.1f} MiB) | "
              f"{fl / 1e9:.1f} |")
    print()
    print(f"Sustained throughput {a.tflops:g} TFLOP/s per GPU; seq_len "
          f"{models[0][0]['seq_len']}.")
    print()
    print("| model | GPUs and link | seq/GPU | compute (ms) | all-reduce (ms) "
          "| comm share, no overlap | efficiency, no overlap | "
          "efficiency, overlap with backward |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for m, n, fl in models:
        G = 4 * n
        for link, P, bw in LINKS:
            comm = 2 * (P - 1) / P * G / bw
            for b in batches:
                compute = fl * b / flops
                fwd, bwd = compute / 3, 2 * compute / 3
                serial = compute + comm
                overlap = fwd + max(bwd, comm)
                print(f"| {m['name']} | {link} | {b} | {ms(compute)} | "
                      f"{ms(comm)} | {100 * comm / serial:.0f} % | "
                      f"{100 * compute / serial:.0f} % | "
                      f"{100 * compute / overlap:.0f} % |")
    print()
    print("Sequences per GPU from which the all-reduce fits in the backward "
          "(overlap hides it completely):")
    print()
    print("| model | " + " | ".join(l for l, _, _ in LINKS) + " |")
    print("|---|" + "---:|" * len(LINKS))
    for m, n, fl in models:
        cells = []
        for _, P, bw in LINKS:
            comm = 2 * (P - 1) / P * 4 * n / bw
            bwd = 2 * fl / 3 / flops
            cells.append(f"{math.ceil(comm / bwd)}")
        print(f"| {m['name']} | " + " | ".join(cells) + " |")
    print()
    print(f"modrt as built today stages the gradient through host memory "
          f"(docs/distributed.md): per step about (5 + 1/P) G over PCIe "
          f"(Gen5 x16, {PCIE / 1e9:g} GB/s per direction), one copy after "
          f"another, beside the all-reduce, and no overlap:")
    print()
    print("| model | P | seq/GPU | PCIe copies (ms) | efficiency today |")
    print("|---|---:|---:|---:|---:|")
    for m, n, fl in models:
        for _, P, bw in LINKS:
            pcie = (5 + 1 / P) * 4 * n / PCIE
            comm = 2 * (P - 1) / P * 4 * n / bw
            for b in batches:
                compute = fl * b / flops
                print(f"| {m['name']} | {P} | {b} | {ms(pcie)} | "
                      f"{100 * compute / (compute + comm + pcie):.0f} % |")

if __name__ == "__main__":
    main()
