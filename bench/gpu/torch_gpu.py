#!/usr/bin/env python3
# ===- torch_gpu.py - PyTorch baselines of the GPU benchmark ---------------===#
#
# Times, at the shapes of bench/gpu/models (d_model 1024 and 2048, 16 heads,
# d_ff 4d SwiGLU, S 2048, B 8, capacity 12.5 %, aux_loss causal router), in
# bf16 and f32:
#
#   scope "model": the same whole models that bench_gpu times through the
#     modc packages (embedding, 0 or 1 layer, final RMSNorm, tied LM head,
#     vocabulary 256), so that both sides can take block = model(1 layer) -
#     model(0 layers) the same way:
#       forward  tokens [B, S] -> logits
#       fwd_bwd  top-k forward, cross-entropy (f32) + 0.01 x the aux loss
#                (BCE of the router logits against the top-k mask), backward
#                to every parameter (no optimizer step), as modc_grad
#       train    one training step of the dense and MoD models: the loss of
#                fwd_bwd, backward, gradient clipping at 1 and AdamW (fused
#                on CUDA) over every parameter, the parameters in the run's
#                dtype; eager, and (bf16, within --deadline) the loss
#                under torch.compile with the same optimizer step: the
#                whole-model training target's baseline
#       decode   one step for B sequences with a static KV cache (masked
#                SDPA over a fixed window, as a CUDA graph needs), after a
#                prefill of S/2 tokens; eager and replayed as a CUDA graph;
#                in bf16 also at each batch of --decode-batches (the
#                decode targets' batches 1 and 64), lines with that "batch"
#   scope "block": the layer alone, x [B, S, d] -> y (fwd_bwd: backward of
#     y and the aux loss to x and the weights), eager and torch.compile
#     (default inductor mode); this is the "PyTorch eager / torch.compile MoD
#     block" of the comparison, and eager block vs eager model difference
#     checks the subtraction.
#   scope "gemm" (impl "cublas", what "gemm"): cuBLAS alone at the shapes of
#     the routed layer's gathered GEMMs, y [M, N] = a [M, K] W^T with M = B*k
#     (the top-k rows) and W [N, K] each weight shape of the layer: d x d
#     (q, k, v, o), 4d x d (gate, up), d x 4d (down). One JSON line per
#     dtype, d and shape (M, N, K, median_ms, tflops); report.py sets them
#     beside our GEMM kernels' times from the per-kernel profile. On CUDA
#     each timed iteration replays a CUDA graph of --gemm-reps calls of
#     torch.mm(a, W.t(), out=y) (so no host launch gap is timed) and the
#     times are per call; the operands stay in L2 between calls.
#
# The MoD layer is the usual public implementation: router r = x w_r, top-k
# per sequence (torch.topk, indices sorted back to position order), gather,
# RoPE at the original positions, causal SDPA among the selected tokens,
# y = x.scatter(x_sel + r_sel * (a + m)). The dense layer is the same block
# on all tokens with F.scaled_dot_product_attention and cuBLAS linears. QKV
# and gate/up projections are fused into one matrix each (a tuned eager
# baseline). RMSNorm is F.rms_norm.
#
# Weights as bench_gpu's: the embedding's column 0 is +2 for tokens t % 8 == 0
# and -2 otherwise and the router weight is 1 on column 0, so that the causal
# rule r > 0 routes about 12.5 % of the decoded tokens.
#
# CUDA events around each iteration, warm-up first, medians. One JSON line per
# measurement on stdout (flushed as it goes); progress on stderr.
#
# Usage: torch_gpu.py [--device cuda|cpu] [--tiny] [--dtypes bf16,f32]
#          [--d-models 1024,2048] [--iters N] [--warmup N] [--decode-iters N]
#          [--no-compile] [--compile-dense] [--deadline SECONDS]
#          [--parts gemm,forward,fwd_bwd,train,decode] [--gemm-reps N]
#          [--decode-batches 1,64]
# --device cpu --tiny runs everything at toy shapes on the CPU (a check, not
# a benchmark).
#
# ===-----------------------------------------------------------------------===#

import argparse
import datetime
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

START = time.time()
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}


def log(*a):
    print(f"[torch_gpu {time.time() - START:6.1f}s]", *a, file=sys.stderr,
          flush=True)


class Cfg:
    def __init__(self, d, heads, ff, S, V, B, capacity):
        self.d, self.h, self.ff, self.S, self.V, self.B = d, heads, ff, S, V, B
        self.hd, self.capacity = d // heads, capacity
        self.k = max(1, min(S, math.ceil(capacity * S)))
        self.eps, self.theta, self.aux_weight = 1e-5, 10000.0, 0.01


# ----------------------------------------------------------------------------
# Parameters and math
# ----------------------------------------------------------------------------

def make_params(c, kind, device, dtype, seed=0):
    """kind: none | dense | mod. Returns {name: leaf tensor}."""
    g = torch.Generator().manual_seed(seed)

    def mat(o, i):
        return torch.randn(o, i, generator=g) / math.sqrt(i)

    p = {}
    emb = torch.randn(c.V, c.d, generator=g)
    emb[:, 0] = torch.where(torch.arange(c.V) % 8 == 0, 2.0, -2.0)
    p["embed"] = emb
    if kind != "none":
        p["attn_norm"] = 1 + 0.1 * torch.randn(c.d, generator=g)
        p["wqkv"] = torch.cat([mat(c.d, c.d) for _ in range(3)])
        p["wo"] = mat(c.d, c.d)
        p["mlp_norm"] = 1 + 0.1 * torch.randn(c.d, generator=g)
        p["w_gu"] = torch.cat([mat(c.ff, c.d), mat(c.ff, c.d)])
        p["w_down"] = mat(c.d, c.ff)
    if kind == "mod":
        r = 0.01 * torch.randn(1, c.d, generator=g)
        r[0, 0] = 1.0
        p["router"] = r
    p["final_norm"] = 1 + 0.1 * torch.randn(c.d, generator=g)
    return {n: t.to(device=device, dtype=dtype) for n, t in p.items()}


class Math:
    """The model's arithmetic on a parameter dict (plain functions, so the
    same code runs eager, under torch.compile and inside a CUDA graph)."""

    def __init__(self, c, device, dtype):
        self.c = c
        j = torch.arange(c.hd // 2, dtype=torch.float64)
        inv = c.theta ** (-2.0 * j / c.hd)
        ang = torch.arange(c.S, dtype=torch.float64)[:, None] * inv
        self.cos = ang.cos().to(device=device, dtype=dtype)  # [S, hd/2]
        self.sin = ang.sin().to(device=device, dtype=dtype)

    def rms(self, x, w):
        return F.rms_norm(x, (x.shape[-1],), w, self.c.eps)

    @staticmethod
    def rotate(t, cos, sin):
        half = t.shape[-1] // 2
        lo, hi = t[..., :half], t[..., half:]
        return torch.cat((lo * cos - hi * sin, hi * cos + lo * sin), dim=-1)

    def block(self, p, x, pos):
        """a and m on rows x [B, n, d] at positions pos ([B, n] ascending, or
        None for 0..n-1)."""
        c = self.c
        B, n, d = x.shape
        nx = self.rms(x, p["attn_norm"])
        q, k, v = F.linear(nx, p["wqkv"]).view(B, n, 3, c.h, c.hd).permute(
            2, 0, 3, 1, 4)
        if pos is None:
            cos, sin = self.cos[:n], self.sin[:n]
        else:
            cos, sin = self.cos[pos][:, None], self.sin[pos][:, None]
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = F.linear(o.transpose(1, 2).reshape(B, n, d), p["wo"])
        n2 = self.rms(x + a, p["mlp_norm"])
        gate, up = F.linear(n2, p["w_gu"]).chunk(2, dim=-1)
        m = F.linear(F.silu(gate) * up, p["w_down"])
        return a, m

    def dense_layer(self, p, x):
        a, m = self.block(p, x, None)
        return x + a + m, None

    def mod_layer(self, p, x):
        """Top-k routing; returns y and the aux loss (BCE of the router
        logits against the top-k mask)."""
        c = self.c
        B, S, d = x.shape
        r = F.linear(x, p["router"]).squeeze(-1)  # [B, S]
        idx = torch.topk(r, c.k, dim=-1, sorted=False).indices
        idx = torch.sort(idx, dim=-1).values  # [B, k], position order
        ix = idx[..., None].expand(B, c.k, d)
        xs = torch.gather(x, 1, ix)
        a, m = self.block(p, xs, idx)
        g = torch.gather(r, 1, idx)[..., None]
        y = x.scatter(1, ix, xs + g * (a + m))
        target = torch.zeros_like(r, dtype=torch.float32).scatter(
            1, idx, 1.0)
        aux = F.binary_cross_entropy_with_logits(r.float(), target)
        return y, aux

    def layer(self, kind, p, x):
        return self.mod_layer(p, x) if kind == "mod" else self.dense_layer(p, x)

    def model(self, kind, p, tokens):
        x = F.embedding(tokens, p["embed"])
        aux = None
        if kind != "none":
            x, aux = self.layer(kind, p, x)
        return F.linear(self.rms(x, p["final_norm"]), p["embed"]), aux

    def loss(self, kind, p, tokens):
        logits, aux = self.model(kind, p, tokens[:, :-1])
        ce = F.cross_entropy(logits.float().reshape(-1, self.c.V),
                             tokens[:, 1:].reshape(-1))
        return ce if aux is None else ce + self.c.aux_weight * aux


# ----------------------------------------------------------------------------
# Decode with a static KV cache
# ----------------------------------------------------------------------------

class Decoder:
    """One decode step of the whole model for B sequences. The cache holds
    K and V [B, h, W, hd] for a fixed window W; counts [B] say how many
    entries each sequence has. A dense layer caches every token; the MoD
    layer runs the block on all B tokens (no data-dependent shapes, so the
    step stays capturable) and keeps the result, and the cache entry, only
    where the causal rule r > 0 routes the token."""

    def __init__(self, mth, kind, p, counts, window):
        c = mth.c
        self.mth, self.kind, self.p = mth, kind, p
        dev, dt = p["embed"].device, p["embed"].dtype
        self.tok = torch.zeros(c.B, dtype=torch.long, device=dev)
        self.pos = torch.zeros(c.B, dtype=torch.long, device=dev)
        self.counts = counts.clone()
        self.window = window
        self.rows = torch.arange(c.B, device=dev)
        self.slots = torch.arange(window, device=dev)
        if kind != "none":
            shape = (c.B, c.h, window, c.hd)
            self.kc = torch.randn(shape, device=dev, dtype=dt)
            self.vc = torch.randn(shape, device=dev, dtype=dt)
        self.logits = None

    def step(self):
        m, c, p = self.mth, self.mth.c, self.p
        x = F.embedding(self.tok, p["embed"])  # [B, d]
        if self.kind != "none":
            B = c.B
            nx = m.rms(x, p["attn_norm"])
            q, k, v = F.linear(nx, p["wqkv"]).view(B, 3, c.h, c.hd).unbind(1)
            cos, sin = m.cos[self.pos][:, None], m.sin[self.pos][:, None]
            q, k = m.rotate(q, cos, sin), m.rotate(k, cos, sin)
            # Write at slot counts[b]; attend to slots <= counts[b].
            self.kc[self.rows, :, self.counts] = k
            self.vc[self.rows, :, self.counts] = v
            mask = (self.slots[None, :] <= self.counts[:, None])[:, None, None]
            o = F.scaled_dot_product_attention(q[:, :, None], self.kc, self.vc,
                                               attn_mask=mask)
            a = F.linear(o.reshape(B, c.d), p["wo"])
            n2 = m.rms(x + a, p["mlp_norm"])
            gate, up = F.linear(n2, p["w_gu"]).chunk(2, dim=-1)
            f = a + F.linear(F.silu(gate) * up, p["w_down"])
            if self.kind == "mod":
                r = F.linear(x, p["router"]).squeeze(-1)
                routed = r > 0
                x = torch.where(routed[:, None], x + r[:, None] * f, x)
                self.counts += routed.long()
            else:
                x = x + f
                self.counts += 1
        self.logits = F.linear(m.rms(x, p["final_norm"]), p["embed"])
        return self.logits


# ----------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------

class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def run(self, fn, warmup, iters, before=None):
        """Median, min, mean in ms of fn() over iters runs after warmup;
        before(i) runs outside the timed region."""
        for i in range(warmup):
            if before:
                before(i)
            fn()
        self.sync()
        ms = []
        if self.cuda:
            ev = [(torch.cuda.Event(enable_timing=True),
                   torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
            for i in range(iters):
                if before:
                    before(warmup + i)
                ev[i][0].record()
                fn()
                ev[i][1].record()
            torch.cuda.synchronize()
            ms = [s.elapsed_time(e) for s, e in ev]
        else:
            for i in range(iters):
                if before:
                    before(warmup + i)
                t0 = time.perf_counter()
                fn()
                ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms), min(ms), statistics.fmean(ms)


def forward_gflop(c, kind, scope):
    """Useful GFLOP of one top-k forward (bench/BenchCommon.h's formula)."""
    total = 0.0
    if kind != "none":
        n = c.k if kind == "mod" else c.S
        total += 2 * 4 * n * c.d * c.d + 2 * 2 * (n * (n + 1) / 2) * c.d
        total += 2 * 3 * n * c.d * c.ff
        if kind == "mod":
            total += 2 * c.S * c.d
    if scope == "model":
        total += 2 * c.S * c.d * c.V
    return total * c.B / 1e9


# The routed layer's weight shapes as (names, N / d, K / d): y = a W^T with
# W [N, K]. SwiGLU's gate and up are two GEMMs of the same shape (ours runs
# them in one kernel, "modk.gemm swiglu [4dxd]x2").
GEMM_SHAPES = (("q,k,v,o", 1, 1), ("gate,up", 4, 1), ("down", 1, 4))


class Bench:
    def __init__(self, args):
        self.args = args
        self.device = torch.device(args.device)
        self.timer = Timer(self.device)
        self.devname = (torch.cuda.get_device_name(self.device)
                        if self.device.type == "cuda" else "cpu")
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ")

    def emit(self, c, impl, dtype, kind, scope, what, res, iters, **extra):
        j = {"impl": impl, "dtype": dtype, "scope": scope, "kind": kind,
             "d_model": c.d, "n_heads": c.h, "d_ff": c.ff, "seq_len": c.S,
             "batch": c.B, "capacity_tokens": c.k, "what": what,
             "median_ms": res[0], "min_ms": res[1], "mean_ms": res[2],
             "iters": iters, "device": self.devname,
             "torch": torch.__version__, "date": self.date}
        if what in ("forward", "fwd_bwd", "train"):
            gf = forward_gflop(c, kind, scope) * (1 if what == "forward" else 3)
            j["gflop"] = gf
            j["tflops"] = gf / res[0] if res[0] > 0 else None
        j.update(extra)
        print(json.dumps(j), flush=True)

    def fail(self, c, impl, dtype, kind, scope, what, e):
        msg = f"{type(e).__name__}: {e}"[:400]
        log(f"FAILED {impl} {dtype} {kind} {scope} {what} d={c.d}: {msg}")
        print(json.dumps({"impl": impl, "dtype": dtype, "scope": scope,
                          "kind": kind, "d_model": c.d, "what": what,
                          "error": msg}), flush=True)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def time_left(self):
        return self.args.deadline - (time.time() - START)

    # -- cuBLAS at the shapes of our gathered GEMMs ----------------------------
    def gemms(self, c, dt_name):
        """y [M, N] = a [M, K] W^T, M = B*k, for each weight shape of the
        routed layer (GEMM_SHAPES); one JSON line each."""
        a, dt = self.args, DTYPES[dt_name]
        M, reps = c.B * c.k, max(1, a.gemm_reps)
        for names, n_mult, k_mult in GEMM_SHAPES:
            N, K = n_mult * c.d, k_mult * c.d
            try:
                x = torch.randn(M, K, device=self.device, dtype=dt)
                w = torch.randn(N, K, device=self.device, dtype=dt) / math.sqrt(K)
                y = torch.empty(M, N, device=self.device, dtype=dt)
                wt = w.t()  # a view: cuBLAS reads W transposed, no copy

                def calls():
                    for _ in range(reps):
                        torch.mm(x, wt, out=y)

                fn, timing = calls, f"host loop of {reps} calls / {reps}"
                if self.device.type == "cuda":
                    try:
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            calls()  # cuBLAS handle and workspace first
                        torch.cuda.current_stream().wait_stream(s)
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            calls()
                        fn = graph.replay
                        timing = (f"CUDA events around a CUDA graph of {reps} "
                                  f"calls / {reps}")
                    except Exception as e:  # eager calls still measure it
                        log(f"cublas {dt_name} d={c.d} {M}x{N}x{K}: no CUDA "
                            f"graph ({type(e).__name__}: {e}); timing eager "
                            "calls")
                        graph = None
                        timing = (f"CUDA events around {reps} eager calls / "
                                  f"{reps}")
                res = self.timer.run(fn, a.warmup, a.iters)
                res = tuple(t / reps for t in res)
                gflop = 2.0 * M * N * K / 1e9
                print(json.dumps({
                    "impl": "cublas", "dtype": dt_name, "scope": "gemm",
                    "kind": "mod", "d_model": c.d, "what": "gemm",
                    "M": M, "N": N, "K": K, "weights": names,
                    "batch": c.B, "capacity_tokens": c.k, "seq_len": c.S,
                    "median_ms": res[0], "min_ms": res[1], "mean_ms": res[2],
                    "iters": a.iters, "reps": reps, "timing": timing,
                    "gflop": gflop,
                    "tflops": gflop / res[0] if res[0] > 0 else None,
                    "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                    "device": self.devname, "torch": torch.__version__,
                    "date": self.date}), flush=True)
                log(f"cublas {dt_name} gemm {M}x{N}x{K} ({names}): "
                    f"{res[0]:.4f} ms")
            except Exception as e:
                msg = f"{type(e).__name__}: {e}"[:400]
                log(f"FAILED cublas {dt_name} gemm {M}x{N}x{K} d={c.d}: {msg}")
                print(json.dumps({"impl": "cublas", "dtype": dt_name,
                                  "scope": "gemm", "kind": "mod",
                                  "d_model": c.d, "what": "gemm", "M": M,
                                  "N": N, "K": K, "error": msg}), flush=True)
            finally:
                x = w = y = wt = fn = graph = None
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    # -- whole models ---------------------------------------------------------
    def models(self, c, dt_name):
        a, dt = self.args, DTYPES[dt_name]
        mth = Math(c, self.device, dt)
        tokens = torch.randint(0, c.V, (c.B, c.S + 1), device=self.device)
        for kind in ("none", "dense", "mod"):
            p = make_params(c, kind, self.device, dt)
            if "forward" in a.parts:
                try:
                    with torch.no_grad():
                        fwd = lambda: mth.model(kind, p, tokens[:, :-1])
                        res = self.timer.run(fwd, a.warmup, a.iters)
                        finite = bool(torch.isfinite(fwd()[0]).all())
                    self.emit(c, "torch_eager", dt_name, kind, "model",
                              "forward", res, a.iters, finite=finite)
                except Exception as e:  # keep going: other rows still count
                    self.fail(c, "torch_eager", dt_name, kind, "model",
                              "forward", e)
            if "fwd_bwd" in a.parts:
                try:
                    leaves = {n: t.clone().requires_grad_(True)
                              for n, t in p.items()}

                    def zero():
                        for t in leaves.values():
                            t.grad = None

                    def fb():
                        mth.loss(kind, leaves, tokens).backward()

                    res = self.timer.run(fb, a.warmup, a.iters,
                                         lambda i: zero())
                    with torch.no_grad():
                        loss = float(mth.loss(kind, leaves, tokens))
                    self.emit(c, "torch_eager", dt_name, kind, "model",
                              "fwd_bwd", res, a.iters, loss=loss,
                              finite=math.isfinite(loss))
                    del leaves
                except Exception as e:
                    self.fail(c, "torch_eager", dt_name, kind, "model",
                              "fwd_bwd", e)
            if "train" in a.parts and kind != "none":
                self.train(c, dt_name, mth, kind, p, tokens, compiled=False)
            if "decode" in a.parts:
                self.decode(c, dt_name, mth, kind, p)
            del p
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def decode(self, c, dt_name, mth, kind, p):
        a = self.args
        P = c.S // 2
        steps = 3 + a.decode_warmup + a.decode_iters  # 3: graph warm-up
        if P + steps > c.S:
            raise SystemExit("torch_gpu: prefill + decode steps exceed seq_len")
        g = torch.Generator().manual_seed(7)
        prompt = torch.randint(0, c.V, (c.B, P), generator=g)
        tok_table = torch.randint(0, c.V, (steps, c.B), generator=g).to(
            self.device)
        pos_table = (P + torch.arange(steps))[:, None].expand(
            steps, c.B).contiguous().to(self.device)
        if kind == "mod":
            # Tokens the causal rule (r > 0) routes in the prompt, computed
            # from layer 0's input (the embedding) as the prefill would.
            r = F.linear(p["embed"].float(), p["router"].float()).squeeze(-1)
            counts = (r.cpu()[prompt] > 0).sum(-1)
        else:
            counts = torch.full((c.B,), P)
        counts = counts.to(self.device)
        window = int(counts.max()) + steps + 1
        for impl in ("torch_eager", "torch_cudagraph"):
            if impl == "torch_cudagraph" and self.device.type != "cuda":
                continue
            try:
                dec = Decoder(mth, kind, p, counts, window)

                def before(i):
                    dec.tok.copy_(tok_table[i])
                    dec.pos.copy_(pos_table[i])

                with torch.no_grad():
                    if impl == "torch_eager":
                        res = self.timer.run(dec.step, a.decode_warmup + 3,
                                             a.decode_iters, before)
                    else:
                        s = torch.cuda.Stream()
                        s.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(s):
                            for i in range(3):
                                before(i)
                                dec.step()
                        torch.cuda.current_stream().wait_stream(s)
                        graph = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(graph):
                            dec.step()
                        res = self.timer.run(
                            graph.replay, a.decode_warmup, a.decode_iters,
                            lambda i: before(i + 3))
                    finite = bool(torch.isfinite(dec.logits).all())
                grown = float((dec.counts - counts).float().mean()) / steps
                self.emit(c, impl, dt_name, kind, "model", "decode", res,
                          a.decode_iters, prefill=P, finite=finite,
                          cached_after_prefill_mean=float(
                              counts.float().mean()),
                          cached_per_step_fraction=grown if kind != "none"
                          else 0.0, window=window)
                del dec
            except Exception as e:
                self.fail(c, impl, dt_name, kind, "model", "decode", e)

    def decode_batches(self, c, dt_name, batches):
        """The decode step of the three models at each batch of batches
        other than c.B (timed with the models)."""
        for b in batches:
            if b == c.B:
                continue
            cb = Cfg(c.d, c.h, c.ff, c.S, c.V, b, c.capacity)
            mth = Math(cb, self.device, DTYPES[dt_name])
            for kind in ("none", "dense", "mod"):
                p = make_params(cb, kind, self.device, DTYPES[dt_name])
                self.decode(cb, dt_name, mth, kind, p)
                del p
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()

    # -- a whole model's training step ----------------------------------------
    def train(self, c, dt_name, mth, kind, p, tokens, compiled):
        """One training step of the whole model (what "train"): the loss of
        fwd_bwd, backward, clipping the gradient norm at 1 and AdamW over
        every parameter, as modc_train_step does. compiled: the loss under
        torch.compile, the optimizer step as in eager."""
        a = self.args
        impl = "torch_compile" if compiled else "torch_eager"
        cuda = self.device.type == "cuda"
        try:
            leaves = {n: t.clone().requires_grad_(True) for n, t in p.items()}
            params = list(leaves.values())
            opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95),
                                    eps=1e-8, weight_decay=0.1, fused=cuda)
            loss_fn = lambda ps: mth.loss(kind, ps, tokens)
            if compiled:
                torch._dynamo.reset()
                loss_fn = torch.compile(loss_fn)

            def step():
                opt.zero_grad(set_to_none=True)
                loss_fn(leaves).backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=cuda)
                opt.step()

            t0 = time.time()
            step()  # compiles when compiled
            self.timer.sync()
            first_s = time.time() - t0
            res = self.timer.run(step, a.warmup, a.iters)
            with torch.no_grad():
                loss = float(mth.loss(kind, leaves, tokens))
            self.emit(c, impl, dt_name, kind, "model", "train", res, a.iters,
                      loss=loss, finite=math.isfinite(loss),
                      first_call_s=round(first_s, 2),
                      tokens_per_s=c.B * c.S / (res[0] * 1e-3))
            log(f"{impl} {dt_name} {kind} model train d={c.d}: "
                f"{res[0]:.3f} ms (first call {first_s:.1f} s)")
        except Exception as e:
            self.fail(c, impl, dt_name, kind, "model", "train", e)
        finally:
            leaves = params = opt = loss_fn = None
            if cuda:
                torch.cuda.empty_cache()

    def train_compiled(self, c, dt_name):
        """The torch.compile'd training step of the MoD model (and the dense
        one with --compile-dense), while --deadline leaves time."""
        a, dt = self.args, DTYPES[dt_name]
        mth = Math(c, self.device, dt)
        tokens = torch.randint(0, c.V, (c.B, c.S + 1), device=self.device)
        for kind in ["mod"] + (["dense"] if a.compile_dense else []):
            if self.time_left() < a.compile_reserve:
                log(f"skipping torch_compile {dt_name} {kind} train d={c.d}: "
                    f"{self.time_left():.0f} s left of --deadline")
                print(json.dumps({"impl": "torch_compile", "dtype": dt_name,
                                  "scope": "model", "kind": kind,
                                  "d_model": c.d, "what": "train",
                                  "skipped": "time budget"}), flush=True)
                continue
            p = make_params(c, kind, self.device, dt)
            self.train(c, dt_name, mth, kind, p, tokens, compiled=True)
            del p

    # -- the layer alone ------------------------------------------------------
    def blocks(self, c, dt_name, compiled):
        a, dt = self.args, DTYPES[dt_name]
        mth = Math(c, self.device, dt)
        impl = "torch_compile" if compiled else "torch_eager"
        kinds = ["mod"] + (["dense"] if not compiled or a.compile_dense else [])
        x0 = torch.randn(c.B, c.S, c.d, device=self.device, dtype=dt)
        gy = torch.randn(c.B, c.S, c.d, device=self.device, dtype=dt)
        for kind in kinds:
            p = make_params(c, kind, self.device, dt)
            fn = (lambda p, x, kind=kind: mth.layer(kind, p, x))
            if compiled:
                torch._dynamo.reset()
                fn = torch.compile(fn)
            for what in ("forward", "fwd_bwd"):
                if what not in a.parts:
                    continue
                if compiled and self.time_left() < a.compile_reserve:
                    log(f"skipping {impl} {dt_name} {kind} {what} d={c.d}: "
                        f"{self.time_left():.0f} s left of --deadline")
                    print(json.dumps({"impl": impl, "dtype": dt_name,
                                      "scope": "block", "kind": kind,
                                      "d_model": c.d, "what": what,
                                      "skipped": "time budget"}), flush=True)
                    continue
                try:
                    if what == "forward":
                        def run():
                            with torch.no_grad():
                                return fn(p, x0)
                        before = None
                    else:
                        leaves = {n: t.clone().requires_grad_(True)
                                  for n, t in p.items()}
                        x = x0.clone().requires_grad_(True)

                        def run():
                            y, aux = fn(leaves, x)
                            if aux is None:
                                y.backward(gy)
                            else:
                                torch.autograd.backward(
                                    [y, aux * c.aux_weight],
                                    [gy, torch.ones_like(aux)])

                        def before(i):
                            x.grad = None
                            for t in leaves.values():
                                t.grad = None
                    t0 = time.time()
                    if before:
                        before(0)
                    run()  # compiles when compiled
                    self.timer.sync()
                    first_s = time.time() - t0
                    res = self.timer.run(run, a.warmup, a.iters, before)
                    extra = {"first_call_s": round(first_s, 2)}
                    if what == "forward":
                        extra["finite"] = bool(torch.isfinite(run()[0]).all())
                    self.emit(c, impl, dt_name, kind, "block", what, res,
                              a.iters, **extra)
                    log(f"{impl} {dt_name} {kind} block {what} d={c.d}: "
                        f"{res[0]:.3f} ms (first call {first_s:.1f} s)")
                except Exception as e:
                    self.fail(c, impl, dt_name, kind, "block", what, e)
                finally:
                    leaves = x = None
            del p, fn
            if self.device.type == "cuda":
                torch.cuda.empty_cache()


def selfcheck():
    """Tiny CPU checks of the math: the MoD layer at capacity 1 with the
    router gate forced to 1 is the dense layer; the decoder reproduces the
    full-sequence forward for a dense model."""
    torch.manual_seed(0)
    c = Cfg(32, 4, 64, 16, 64, 2, 1.0)
    mth = Math(c, torch.device("cpu"), torch.float32)
    p = make_params(c, "mod", "cpu", torch.float32, 3)
    x = torch.randn(c.B, c.S, c.d)
    yd, _ = mth.dense_layer(p, x)
    # Capacity 1: every token routed, in order; y = x + r * (a + m).
    ym, _ = mth.mod_layer(p, x)
    r = F.linear(x, p["router"])
    a, m = mth.block(p, x, None)
    assert torch.allclose(ym, x + r * (a + m), atol=1e-5), "mod layer"
    assert torch.allclose(yd, x + a + m, atol=1e-5), "dense layer"
    # Decoder vs full forward (dense, counts = position, window = S).
    pd = make_params(c, "dense", "cpu", torch.float32, 4)
    tok = torch.randint(0, c.V, (c.B, c.S))
    full, _ = mth.model("dense", pd, tok)
    dec = Decoder(mth, "dense", pd, torch.zeros(c.B, dtype=torch.long), c.S)
    for t in range(c.S):
        dec.tok.copy_(tok[:, t])
        dec.pos.fill_(t)
        out = dec.step()
        err = (out - full[:, t]).abs().max().item()
        assert err < 1e-3, f"decode step {t}: {err}"
    # MoD decoder vs the causal rule on the full sequence: the tokens with
    # r > 0 go through the block among themselves, at their positions.
    pm = make_params(c, "mod", "cpu", torch.float32, 5)
    x = F.embedding(tok, pm["embed"])
    r = F.linear(x, pm["router"]).squeeze(-1)
    y = x.clone()
    for b in range(c.B):
        idx = (r[b] > 0).nonzero().squeeze(-1)
        if idx.numel():
            a, m = mth.block(pm, x[b, idx][None], idx[None])
            y[b, idx] = x[b, idx] + r[b, idx, None] * (a + m)[0]
    ref = F.linear(mth.rms(y, pm["final_norm"]), pm["embed"])
    dec = Decoder(mth, "mod", pm, torch.zeros(c.B, dtype=torch.long), c.S)
    for t in range(c.S):
        dec.tok.copy_(tok[:, t])
        dec.pos.fill_(t)
        out = dec.step()
        err = (out - ref[:, t]).abs().max().item()
        assert err < 1e-3, f"MoD decode step {t}: {err}"
    assert torch.equal(dec.counts, (r > 0).sum(-1)), "MoD cache counts"
    log("selfcheck: ok")


def main():
    ap = argparse.ArgumentParser(
        description="PyTorch baselines of bench/gpu (see the file header)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true",
                    help="toy shapes (d 64, S 64, B 2): a check, not a benchmark")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--d-models", default="1024,2048")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--decode-iters", type=int, default=100)
    ap.add_argument("--decode-warmup", type=int, default=10)
    ap.add_argument("--parts", default="gemm,forward,fwd_bwd,train,decode")
    ap.add_argument("--gemm-reps", type=int, default=20,
                    help="cuBLAS calls per timed iteration of the gemm part")
    ap.add_argument("--decode-batches", default="",
                    help="comma-separated batches at which to time the bf16 "
                         "decode step too (run.sh: 1,64)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--compile-dense", action="store_true",
                    help="also torch.compile the dense block")
    ap.add_argument("--deadline", type=float, default=1e9,
                    help="seconds from start after which no new torch.compile "
                         "is started (less --compile-reserve)")
    ap.add_argument("--compile-reserve", type=float, default=45.0)
    ap.add_argument("--selfcheck", action="store_true")
    a = ap.parse_args()
    a.parts = set(a.parts.split(","))
    if a.selfcheck:
        selfcheck()
        return 0
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        log("CUDA is not available to PyTorch; use --device cpu --tiny")
        return 1
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    bench = Bench(a)
    if a.tiny:
        shapes = [Cfg(64, 4, 256, 64, 256, 2, 0.125)]
        a.iters, a.warmup = min(a.iters, 3), min(a.warmup, 1)
        a.decode_iters, a.decode_warmup = min(a.decode_iters, 8), 2
    else:
        shapes = [Cfg(int(d), 16, 4 * int(d), a.seq_len, 256, a.batch, 0.125)
                  for d in a.d_models.split(",")]
    dtypes = a.dtypes.split(",")
    try:
        decode_batches = [int(b) for b in a.decode_batches.split(",") if b]
    except ValueError:
        ap.error(f"--decode-batches: expected comma-separated batches, got "
                 f"{a.decode_batches!r}")
    if any(b < 1 for b in decode_batches):
        ap.error(f"--decode-batches: batches must be >= 1, got "
                 f"{a.decode_batches!r}")
    log(f"torch {torch.__version__} on {bench.devname}")
    for dt in dtypes:
        for c in shapes:
            if "gemm" in a.parts:
                log(f"cuBLAS {dt} d={c.d}: the gathered GEMMs' shapes")
                bench.gemms(c, dt)
            log(f"eager {dt} d={c.d}: models")
            bench.models(c, dt)
            log(f"eager {dt} d={c.d}: blocks")
            bench.blocks(c, dt, compiled=False)
            if dt == "bf16" and "decode" in a.parts and decode_batches:
                log(f"decode {dt} d={c.d} at batches {a.decode_batches}")
                bench.decode_batches(c, dt, decode_batches)
    if not a.no_compile:
        for dt in dtypes:
            for c in shapes:
                log(f"torch.compile {dt} d={c.d}: blocks")
                bench.blocks(c, dt, compiled=True)
        # The whole-model training target is in bf16: its compiled baseline
        # after the blocks', inside what is left.
        if "bf16" in dtypes and "train" in a.parts:
            for c in shapes:
                log(f"torch.compile bf16 d={c.d}: the training step")
                bench.train_compiled(c, "bf16")
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
