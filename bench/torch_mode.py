#!/usr/bin/env python3
# ===- torch_mode.py - PyTorch baseline of one MoE / MoDE MLP sublayer ----===#
#
# The MLP sublayer of an MoE layer as docs/model-format.md section 7 defines
# it, in PyTorch, for benchmarking only: y = h + m with n = RMSNorm(h),
# p = softmax(W_router n), e = argmax p (ties to the lower index), per
# sequence and per real expert a capacity C = clamp(ceil(cf * S / (E+N)), 1, S)
# filled in position order, and m_i = p_i[e_i] * SwiGLU_{e_i}(n_i) for kept
# tokens (scatter-add), 0 otherwise. It reads the same model JSON as modc
# (d_model, seq_len, norm_eps and the moe key) and times, on the CPU in f32
# on torch.get_num_threads() threads (bench/run_mode.sh), or with --device
# cuda in --dtype bf16 or f32 with CUDA events (bench/gpu/run.sh; weights
# and activations of that dtype, PyTorch's usual bf16 practice):
#
# Each line also carries the router's shares of the batch's tokens (kept,
# noop, dropped: the operating point). It times:
#
#   fwd      the sublayer's forward
#   fwd+bwd  forward, a scalar loss sum(y * g) with a fixed random g, and
#            backward to h and every weight
#
# in eager mode and under torch.compile, for two formulations of the same
# math, and prints JSON lines (one per formulation, mode and measure):
#
#   loop     per real expert, index the kept tokens (data-dependent count),
#            run the expert on them and index_add_ p * out back: no work on
#            dropped tokens, but shapes change from call to call;
#   padded   every (sequence, expert) gets exactly C slots (static shapes):
#            the kept tokens' indices are scattered into a [B, E, C] table,
#            the experts run as one batched product [E, B*C, d], empty slots
#            carry weight 0. Wasted work on empty slots, no graph breaks.
#
# Usage: torch_mode.py MODEL.json [--batch 4] [--iters 20] [--warmup 3]
#                      [--no-compile] [--selftest] [--threads N]
#                      [--device cpu|cuda] [--dtype f32|bf16]
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def config(path):
    with open(path) as f:
        c = json.load(f)
    moe = c["moe"]
    E, N = moe["n_experts"], moe.get("noop_experts", 0)
    S = c["seq_len"]
    cf = moe.get("capacity_factor", 1.0)
    C = max(1, min(S, math.ceil(cf * S / (E + N))))
    return dict(d=c["d_model"], S=S, E=E, N=N, F=moe["d_expert"], C=C,
                eps=c.get("norm_eps", 1e-5), name=c.get("name", path))


def make_params(c, seed=1, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    d, E, N, Fh = c["d"], c["E"], c["N"], c["F"]

    def rnd(*shape, std=0.02):
        w = torch.randn(*shape, generator=g) * std
        return w.to(device=device, dtype=dtype).requires_grad_()

    return dict(
        norm=torch.ones(d, device=device, dtype=dtype, requires_grad=True),
        router=rnd(E + N, d),
        w_gate=rnd(E, Fh, d),
        w_up=rnd(E, Fh, d),
        w_down=rnd(E, d, Fh, std=0.02 / math.sqrt(2)),
    )


def route(c, h, P):
    """RMSNorm, router softmax, top-1 choice and the capacity rule.
    Returns n [B,S,d], p [B,S] (the chosen probability), e [B,S] and the
    kept mask [B,S] and slot (rank within its expert, 0-based) [B,S]."""
    n = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + c["eps"]) * P["norm"]
    probs = torch.softmax(n @ P["router"].t(), dim=-1)
    e = torch.argmax(probs, dim=-1)
    p = probs.gather(-1, e.unsqueeze(-1)).squeeze(-1)
    real = e < c["E"]
    onehot = F.one_hot(e, c["E"] + c["N"])[..., : c["E"]] * real.unsqueeze(-1)
    rank = (onehot.cumsum(dim=1) * onehot).sum(-1)  # 1-based within expert
    kept = real & (rank <= c["C"])
    return n, p, e, kept, rank - 1


def sublayer_loop(c, h, P):
    B, S, d = h.shape
    n, p, e, kept, _ = route(c, h, P)
    nf, pf, ef, kf = n.reshape(B * S, d), p.reshape(-1), e.reshape(-1), kept.reshape(-1)
    m = torch.zeros_like(nf)
    for x in range(c["E"]):
        idx = torch.nonzero(kf & (ef == x)).squeeze(-1)
        xs = nf.index_select(0, idx)
        a = F.silu(xs @ P["w_gate"][x].t()) * (xs @ P["w_up"][x].t())
        out = (a @ P["w_down"][x].t()) * pf.index_select(0, idx).unsqueeze(-1)
        m = m.index_add(0, idx, out)
    return h + m.view(B, S, d)


def sublayer_padded(c, h, P):
    B, S, d = h.shape
    E, C = c["E"], c["C"]
    n, p, e, kept, slot = route(c, h, P)
    dev = h.device
    with torch.no_grad():
        pos = torch.arange(B * S, device=dev).view(B, S)
        dest = (torch.arange(B, device=dev).view(B, 1) * E + e.clamp(max=E - 1)) * C + slot
        dest = torch.where(kept, dest, torch.full_like(dest, B * E * C))
        table = torch.full((B * E * C + 1,), B * S, dtype=torch.long, device=dev)  # B*S: a zero row
        table.scatter_(0, dest.reshape(-1), pos.reshape(-1))
        table = table[:-1].view(B, E, C).permute(1, 0, 2).reshape(E, B * C)
    nf = torch.cat([n.reshape(B * S, d), n.new_zeros(1, d)])
    pf = torch.cat([(p * kept).reshape(-1), p.new_zeros(1)])
    xs = nf[table]  # [E, B*C, d]
    a = F.silu(torch.bmm(xs, P["w_gate"].transpose(1, 2))) * torch.bmm(
        xs, P["w_up"].transpose(1, 2))
    out = torch.bmm(a, P["w_down"].transpose(1, 2)) * pf[table].unsqueeze(-1)
    m = nf.new_zeros(B * S + 1, d).index_add(0, table.reshape(-1), out.reshape(-1, d))
    return h + m[:-1].view(B, S, d)


def time_it(fn, iters, warmup, cuda=False):
    """Median ms of fn() over iters runs after warmup ones: the host clock,
    or on CUDA an event pair around each run, read after one final wait."""
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True),
               torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, stop in ev:
            start.record()
            fn()
            stop.record()
        torch.cuda.synchronize()
        return statistics.median(start.elapsed_time(stop) for start, stop in ev)
    ts = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)


def selftest(c):
    torch.manual_seed(0)
    P = make_params(c)
    h = torch.randn(3, c["S"], c["d"])
    a, b = sublayer_loop(c, h, P), sublayer_padded(c, h, P)
    err = (a - b).abs().max().item()
    n, p, e, kept, _ = route(c, h, P)
    # Reference capacity rule, token by token in position order.
    ok = True
    for bi in range(h.shape[0]):
        count = [0] * c["E"]
        for s in range(c["S"]):
            x = int(e[bi, s])
            want = x < c["E"] and count[x] < c["C"]
            if want:
                count[x] += 1
            ok &= bool(kept[bi, s]) == want
    print(f"selftest {c['name']}: loop vs padded max |diff| {err:.2e}, "
          f"capacity rule {'ok' if ok else 'WRONG'}, kept {kept.float().mean():.3f}")
    return err < 1e-5 and ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (default: PyTorch's own)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--dtype", default="f32", choices=("f32", "bf16"))
    args = ap.parse_args()
    dev = torch.device(args.device)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    cuda = dev.type == "cuda"
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    c = config(args.model)
    if args.selftest:
        sys.exit(0 if selftest(c) else 1)
    torch.manual_seed(0)
    P = make_params(c, device=dev, dtype=dt)
    h = torch.randn(args.batch, c["S"], c["d"]).to(dev, dt).requires_grad_()
    g = torch.randn(args.batch, c["S"], c["d"]).to(dev, dt)
    params = list(P.values()) + [h]
    # The operating point: how the router decided these tokens.
    with torch.no_grad():
        _, _, e, kept, _ = route(c, h, P)
    n = e.numel()
    shares = dict(kept=kept.sum().item() / n,
                  noop=(e >= c["E"]).sum().item() / n,
                  dropped=((e < c["E"]) & ~kept).sum().item() / n)
    for form, fn in (("loop", sublayer_loop), ("padded", sublayer_padded)):
        for mode in ("eager",) if args.no_compile else ("eager", "compile"):
            for measure in ("fwd", "fwd+bwd"):
                # A fresh compilation per measure: the forward runs under
                # no_grad, the training one records the graph.
                torch._dynamo.reset()
                f = torch.compile(fn) if mode == "compile" else fn

                def fwd():
                    with torch.no_grad():
                        f(c, h, P)

                def fwd_bwd():
                    for t in params:
                        t.grad = None
                    (f(c, h, P) * g).sum().backward()

                step = fwd if measure == "fwd" else fwd_bwd
                ms = time_it(step, args.iters, args.warmup, cuda)
                print(json.dumps(dict(impl="torch_mode", model=c["name"], form=form,
                                      mode=mode, measure=measure, ms=ms,
                                      threads=torch.get_num_threads(),
                                      device=args.device, dtype=args.dtype,
                                      d_model=c["d"], batch=args.batch,
                                      **shares)), flush=True)


if __name__ == "__main__":
    main()
