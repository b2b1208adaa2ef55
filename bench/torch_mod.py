#!/usr/bin/env python3
# ===- torch_mod.py - PyTorch CPU baseline of the MoD forward pass ---------===#
#
# A PyTorch implementation of the forward pass of docs/model-format.md, for
# benchmarking only. It reads the same model JSON as modc, builds random
# weights, and times the forward in eager mode and under torch.compile. Routed
# layers gather the top-k tokens (ties to the lower position, selected set in
# ascending position order), run the block on them with RoPE at original
# positions and causal attention among them, and scatter y = x + g(r) * (a + m)
# back, as public MoD implementations do.
#
# With --train it times one training step instead: the forward in top-k
# mode on t[:, :S], the cross-entropy against t[:, 1:], the aux/predictor
# loss of docs/model-format.md section 4 (aux_loss_weight times the mean over
# routed layers of BCEWithLogits against the top-k mask; the predictor reads
# stopgrad(x)), backward, global-norm clipping at 1.0 and a
# torch.optim.AdamW step (betas 0.9/0.95, eps 1e-8, weight decay 0.1 except
# on norm weights and biases), as modrun train does. torch.compile then
# compiles the loss (forward + backward through AOTAutograd); the clipping
# and the optimizer step stay eager.
#
# Usage: torch_mod.py MODEL.json [--batch 4] [--iters 5] [--warmup 2]
#                     [--no-compile] [--json] [--selftest] [--train]
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


def parse_config(desc):
    """Applies docs/model-format.md section 1 defaults; returns a plain dict."""
    c = dict(desc)
    c.setdefault("mlp", "swiglu")
    c.setdefault("norm_eps", 1e-5)
    c.setdefault("rope_theta", 10000.0)
    c.setdefault("tie_embeddings", True)
    S, L = c["seq_len"], c["n_layers"]
    mod = c.get("mod")
    routed = [False] * L
    k = S
    gate, causal_router, hidden = "linear", "none", c["d_model"]
    if mod is not None:
        if "capacity_tokens" in mod:
            k = int(mod["capacity_tokens"])
        else:
            k = int(math.ceil(mod.get("capacity", 0.125) * S))
        k = max(1, min(S, k))
        sched = mod.get("schedule", "every_other")
        if isinstance(sched, list):
            for l in sched:
                routed[l] = True
        else:
            routed = [
                {"every_other": l % 2 == 1, "all": True, "none": False}[sched]
                for l in range(L)
            ]
        gate = mod.get("gate", "linear")
        causal_router = mod.get("causal_router", "none")
        hidden = mod.get("predictor_hidden", c["d_model"])
    c.update(routed=routed, k=k, gate=gate, causal_router=causal_router,
             predictor_hidden=hidden)
    return c


def make_weights(c, seed=0):
    """Random weights with the names and shapes of docs/model-format.md
    section 2."""
    g = torch.Generator().manual_seed(seed)
    d, ff, V, H = c["d_model"], c["d_ff"], c["vocab_size"], c["predictor_hidden"]

    def normal(*shape, std=None):
        std = std if std is not None else 1.0 / math.sqrt(shape[-1])
        return torch.randn(*shape, generator=g) * std

    w = {"embed.weight": normal(V, d, std=1.0)}
    for l in range(c["n_layers"]):
        p = f"blocks.{l}."
        w[p + "attn_norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        for n in ("wq", "wk", "wv", "wo"):
            w[p + f"attn.{n}.weight"] = normal(d, d)
        w[p + "mlp_norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
        if c["mlp"] == "swiglu":
            w[p + "mlp.w_gate.weight"] = normal(ff, d)
        w[p + "mlp.w_up.weight"] = normal(ff, d)
        w[p + "mlp.w_down.weight"] = normal(d, ff)
        if c["routed"][l]:
            w[p + "router.weight"] = normal(1, d)
            if c["causal_router"] == "predictor":
                w[p + "predictor.fc1.weight"] = normal(H, d)
                w[p + "predictor.fc1.bias"] = 0.2 * torch.randn(H, generator=g)
                w[p + "predictor.fc2.weight"] = normal(1, H)
                w[p + "predictor.fc2.bias"] = 0.2 * torch.randn(1, generator=g)
    w["final_norm.weight"] = 1 + 0.1 * torch.randn(d, generator=g)
    if not c["tie_embeddings"]:
        w["lm_head.weight"] = normal(V, d)
    return w


class ModModel(torch.nn.Module):
    """docs/model-format.md section 3 as a module; weights are plain tensors."""

    def __init__(self, c, weights, mode="topk"):
        super().__init__()
        self.c, self.w, self.mode = c, weights, mode
        hd = c["d_model"] // c["n_heads"]
        j = torch.arange(hd // 2, dtype=torch.float64)
        inv = c["rope_theta"] ** (-2.0 * j / hd)
        ang = torch.arange(c["seq_len"], dtype=torch.float64)[:, None] * inv
        self.cos = ang.cos().float()  # [S, hd/2]
        self.sin = ang.sin().float()
        self.aux = None  # a list while computing the training loss

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c["norm_eps"]) * w

    def rope(self, t, pos):
        # t: [B, h, n, hd]; pos: [B, n] original positions.
        half = t.shape[-1] // 2
        cos = self.cos[pos][:, None]  # [B, 1, n, hd/2]
        sin = self.sin[pos][:, None]
        lo, hi = t[..., :half], t[..., half:]
        return torch.cat((lo * cos - hi * sin, hi * cos + lo * sin), dim=-1)

    def block(self, l, x, pos):
        """a and m of docs/model-format.md section 3 on rows x [B, n, d] at
        positions pos [B, n] (ascending, so causal by position is the lower
        triangle)."""
        c, w, p = self.c, self.w, f"blocks.{l}."
        B, n, d = x.shape
        h = c["n_heads"]
        hd = d // h
        nx = self.rms(x, w[p + "attn_norm.weight"])
        q = F.linear(nx, w[p + "attn.wq.weight"]).view(B, n, h, hd).transpose(1, 2)
        k = F.linear(nx, w[p + "attn.wk.weight"]).view(B, n, h, hd).transpose(1, 2)
        v = F.linear(nx, w[p + "attn.wv.weight"]).view(B, n, h, hd).transpose(1, 2)
        q, k = self.rope(q, pos), self.rope(k, pos)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        a = F.linear(o.transpose(1, 2).reshape(B, n, d), w[p + "attn.wo.weight"])
        n2 = self.rms(x + a, w[p + "mlp_norm.weight"])
        if c["mlp"] == "swiglu":
            act = F.silu(F.linear(n2, w[p + "mlp.w_gate.weight"])) * F.linear(
                n2, w[p + "mlp.w_up.weight"])
        else:
            act = F.gelu(F.linear(n2, w[p + "mlp.w_up.weight"]))
        m = F.linear(act, w[p + "mlp.w_down.weight"])
        return a, m

    def gate(self, r):
        g = self.c["gate"]
        if g == "linear":
            return r
        if g == "sigmoid":
            return torch.sigmoid(r)
        return torch.ones_like(r)

    def routed_layer(self, l, x):
        c, w, p = self.c, self.w, f"blocks.{l}."
        B, S, d = x.shape
        r = F.linear(x, w[p + "router.weight"]).squeeze(-1)  # [B, S]
        if self.mode == "topk":
            # Stable descending sort: ties go to the lower position.
            order = torch.sort(r, dim=-1, descending=True, stable=True).indices
            idx = torch.sort(order[:, : c["k"]], dim=-1).values  # [B, k]
            xs = torch.gather(x, 1, idx[..., None].expand(B, idx.shape[1], d))
            a, m = self.block(l, xs, idx)
            g = self.gate(torch.gather(r, 1, idx))[..., None]
            ys = xs + g * (a + m)
            if self.aux is not None and c["causal_router"] != "none":
                target = torch.zeros_like(r).scatter(
                    1, idx, torch.ones_like(idx, dtype=r.dtype))
                if c["causal_router"] == "aux_loss":
                    logit = r
                else:
                    xd = x.detach()
                    hid = F.silu(F.linear(xd, w[p + "predictor.fc1.weight"],
                                          w[p + "predictor.fc1.bias"]))
                    logit = F.linear(hid, w[p + "predictor.fc2.weight"],
                                     w[p + "predictor.fc2.bias"]).squeeze(-1)
                self.aux.append(
                    F.binary_cross_entropy_with_logits(logit, target))
            return x.scatter(1, idx[..., None].expand_as(ys), ys)
        # Causal mode: per-token decision, a ragged count per sequence.
        if c["causal_router"] == "aux_loss":
            dec = r > 0
        else:
            hid = F.silu(F.linear(x, w[p + "predictor.fc1.weight"],
                                  w[p + "predictor.fc1.bias"]))
            dec = F.linear(hid, w[p + "predictor.fc2.weight"],
                           w[p + "predictor.fc2.bias"]).squeeze(-1) > 0
        y = x.clone()
        for b in range(B):
            idx = dec[b].nonzero().squeeze(-1)
            if idx.numel() == 0:
                continue
            xs = x[b, idx][None]
            a, m = self.block(l, xs, idx[None])
            y[b, idx] = (xs + self.gate(r[b, idx])[None, :, None] * (a + m))[0]
        return y

    def forward(self, tokens):
        c, w = self.c, self.w
        B, S = tokens.shape
        x = F.embedding(tokens, w["embed.weight"])
        pos = torch.arange(S).expand(B, S)
        for l in range(c["n_layers"]):
            if c["routed"][l]:
                x = self.routed_layer(l, x)
            else:
                a, m = self.block(l, x, pos)
                x = (x + a) + m
        head = w["embed.weight"] if c["tie_embeddings"] else w["lm_head.weight"]
        return F.linear(self.rms(x, w["final_norm.weight"]), head)


def forward_flops(c, batch):
    """Useful FLOPs of one top-k forward (2 per multiply-add), the same
    formula bench_forward.cpp uses: projections, causal attention (half the
    score matrix), MLP, routers, LM head."""
    d, ff, S, V = c["d_model"], c["d_ff"], c["seq_len"], c["vocab_size"]
    total = 0.0
    for l in range(c["n_layers"]):
        n = c["k"] if c["routed"][l] else S
        total += 2 * 4 * n * d * d
        total += 2 * 2 * (n * (n + 1) / 2) * d
        total += 2 * (3 if c["mlp"] == "swiglu" else 2) * n * d * ff
        if c["routed"][l]:
            total += 2 * S * d
    total += 2 * S * d * V
    return total * batch


class TrainLoss(torch.nn.Module):
    """Total training loss of docs/model-format.md section 4 on tokens
    [B, S + 1]."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        mod = model.c.get("mod") or {}
        self.aux_weight = float(mod.get("aux_loss_weight", 0.01))

    def forward(self, tokens):
        c = self.model.c
        self.model.aux = []
        logits = self.model(tokens[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, c["vocab_size"]),
                             tokens[:, 1:].reshape(-1))
        aux = self.model.aux
        self.model.aux = None
        if aux:
            return ce + self.aux_weight * (sum(aux) / len(aux))
        return ce


def make_train_step(c, weights, compile_loss):
    """One training step: loss, backward, clip, AdamW (as modrun train)."""
    params = {n: t.clone().requires_grad_(True) for n, t in weights.items()}
    model = ModModel(c, params).train()
    loss_fn = TrainLoss(model)
    if compile_loss:
        loss_fn = torch.compile(loss_fn)
    no_decay = [t for n, t in params.items()
                if n.endswith("norm.weight") or n.endswith(".bias")]
    decay = [t for n, t in params.items()
             if not (n.endswith("norm.weight") or n.endswith(".bias"))]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    plist = list(params.values())

    def step(tokens):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, 1.0)
        opt.step()
        return loss.detach()

    return step


def time_train(step, tokens, warmup, iters):
    for _ in range(warmup):
        step(tokens)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step(tokens)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_it(fn, tokens, warmup, iters):
    with torch.no_grad():
        for _ in range(warmup):
            fn(tokens)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            fn(tokens)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def selftest():
    """Capacity 1.0 with g = 1 equals dense; causal-mode rows before a
    changed token do not move."""
    torch.manual_seed(0)
    base = {"name": "t", "vocab_size": 64, "d_model": 32, "n_layers": 2,
            "n_heads": 4, "d_ff": 64, "seq_len": 16, "mlp": "gelu",
            "tie_embeddings": False}
    dense = parse_config(base)
    routed = parse_config(dict(base, mod={"capacity": 1.0, "schedule": "all",
                                          "gate": "one"}))
    w = make_weights(routed, 1)
    tok = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        dl = ModModel(dense, w)(tok)
        rl = ModModel(routed, w)(tok)
    err = (dl - rl).abs().max().item() / dl.abs().max().item()
    assert err < 1e-5, err
    causal = parse_config(dict(base, mod={"capacity": 0.25, "schedule": "all",
                                          "causal_router": "predictor",
                                          "predictor_hidden": 8}))
    w = make_weights(causal, 2)
    t2 = tok.clone()
    t2[:, -1] = (t2[:, -1] + 1) % 64
    with torch.no_grad():
        a = ModModel(causal, w, "causal")(tok)
        b = ModModel(causal, w, "causal")(t2)
    assert torch.equal(a[:, :-1], b[:, :-1])
    print("torch_mod selftest: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", nargs="?")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object instead of text")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--train", action="store_true",
                    help="time a training step instead of the forward")
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return
    if not args.model:
        ap.error("a model JSON is required")
    with open(args.model) as f:
        c = parse_config(json.load(f))
    if args.train:
        return main_train(args, c)
    model = ModModel(c, make_weights(c)).eval()
    tokens = torch.randint(0, c["vocab_size"], (args.batch, c["seq_len"]))
    flops = forward_flops(c, args.batch)
    res = {"model": c.get("name", args.model), "batch": args.batch,
           "threads": torch.get_num_threads(), "gflop": flops / 1e9,
           "torch": torch.__version__}
    res["eager_ms"] = time_it(model, tokens, args.warmup, args.iters)
    if not args.no_compile:
        try:
            compiled = torch.compile(model)
            t0 = time.perf_counter()
            with torch.no_grad():
                compiled(tokens)
            res["compile_s"] = time.perf_counter() - t0
            res["compiled_ms"] = time_it(compiled, tokens, args.warmup,
                                         args.iters)
        except Exception as e:  # inductor needs a working C++ toolchain
            res["compile_error"] = f"{type(e).__name__}: {e}"[:300]
    for key in ("eager", "compiled"):
        if key + "_ms" in res:
            res[key + "_gflops"] = flops / (res[key + "_ms"] * 1e-3) / 1e9
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>16}: {v:.3f}" if isinstance(v, float) else f"{k:>16}: {v}")


def main_train(args, c):
    """--train: medians of one training step, eager and torch.compile."""
    weights = make_weights(c)
    tokens = torch.randint(0, c["vocab_size"], (args.batch, c["seq_len"] + 1))
    flops = 3.0 * forward_flops(c, args.batch)
    res = {"model": c.get("name", args.model), "batch": args.batch,
           "threads": torch.get_num_threads(), "train_gflop": flops / 1e9,
           "torch": torch.__version__}
    res["train_eager_ms"] = time_train(make_train_step(c, weights, False),
                                       tokens, args.warmup, args.iters)
    if not args.no_compile:
        try:
            step = make_train_step(c, weights, True)
            t0 = time.perf_counter()
            step(tokens)
            res["train_compile_s"] = time.perf_counter() - t0
            res["train_compiled_ms"] = time_train(step, tokens, args.warmup,
                                                  args.iters)
        except Exception as e:  # inductor needs a working C++ toolchain
            res["train_compile_error"] = f"{type(e).__name__}: {e}"[:300]
    for key in ("eager", "compiled"):
        if f"train_{key}_ms" in res:
            res[f"train_{key}_gflops"] = flops / (res[f"train_{key}_ms"] * 1e-3) / 1e9
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>20}: {v:.3f}" if isinstance(v, float) else f"{k:>20}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
