#!/usr/bin/env bash
#===- run_mode.sh - MoDE (MoE with no-op experts) against MoE and dense --===#
#
# One run, on the CPU, of the models of bench/models/mode (d_model 256,
# 4 heads, seq_len 256, vocab 256, f32):
#
#   mode_dense       4 dense layers, SwiGLU d_ff 1024
#   mode_moe         4 layers, MoE MLPs: E = 4 real experts, N = 0,
#                    d_expert 512, capacity_factor 1.25
#   mode_mode        the same with N = 4 no-op experts (N/(E+N) = 50 %)
#   mode_layer_*     1-layer versions (moe, mode), the same layer with a
#                    dense SwiGLU of width 1 (stub: attention, the MLP's
#                    norm and residual, almost no MLP work) and 0 layers
#
# and prints:
#   1. the whole models: training step (bench_train: grad + adamw) and
#      decode (bench_decode, batch 1 and 8), MoDE / MoE and MoDE / dense;
#   2. the MoE MLP sublayer alone, as layer_X minus layer_stub (forward from
#      bench_forward, forward+backward from bench_train's grad time), MoDE
#      against N = 0 (target <= 0.6); and the MLP's own kernels summed
#      from the package's profile (MODC_PROFILE=1), forward and in the
#      gradient entry (forward + backward).
#      Every benchmark runs its models interleaved (--interleave: each
#      round calls every model twice, timing the second call, which finds
#      the caches as its own model leaves them), so that the machine's
#      drift, which moved these differences by 0.2 between rounds run model
#      after model, falls on all of them alike;
#   3. bench/torch_mode.py's PyTorch baseline of the same sublayer (eager and
#      torch.compile; the faster of its two formulations per mode), against
#      ours (targets: >= 1.5x eager, >= 1.2x torch.compile).
#
# The MoE models' costs depend on their routing: an expert's products run
# on the tokens it keeps. So the four MoE models are first trained briefly
# on the corpus (modrun train, TRAIN_STEPS steps, where the balance loss
# spreads the tokens over the experts as in a real run) and every timed
# batch is the corpus's held-out text; each benchmark prints how each MoE
# layer decided its batch (kept, no-op, dropped), the operating point the
# times hold for. Dense models are timed on fresh weights: their cost does
# not depend on the values.
#
# Usage: bench/run_mode.sh [BUILD_DIR]       (default: build; needs the
#        targets modc, modrun, bench_forward, bench_train and bench_decode)
# Environment: THREADS (2: OMP_NUM_THREADS for ours, torch.set_num_threads
# for PyTorch), BATCH (4), ITERS (20), WARMUP (3), DECODE_NEW (64 tokens
# after a 128-token prompt), ROUNDS (3: rounds of bench_forward and
# bench_train, median over rounds), TORCH_COMPILE=0 to skip torch.compile,
# KEEP=DIR to keep the raw logs there, CORPUS (the fortunes file),
# TRAIN_STEPS (200; 0: fresh weights and random tokens, as before).
#
#===-----------------------------------------------------------------------===#
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${1:-build}"
threads="${THREADS:-2}"; batch="${BATCH:-4}"; iters="${ITERS:-20}"
warmup="${WARMUP:-3}"; new="${DECODE_NEW:-64}"; rounds="${ROUNDS:-3}"
export OMP_NUM_THREADS="$threads"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
models="$here/models/mode"
corpus="${CORPUS:-/usr/share/games/fortunes/fortunes}"
train_steps="${TRAIN_STEPS:-200}"
for t in bench/bench_forward bench/bench_train bench/bench_decode bin/modc runtime/modrun; do
  [[ -x "$build/$t" ]] || { echo "run_mode.sh: build $build/$t first" >&2; exit 1; }
done
[[ "$train_steps" == 0 || -r "$corpus" ]] || {
  echo "run_mode.sh: cannot read the corpus $corpus (apt-get install fortunes, or set CORPUS)" >&2; exit 1; }
if [[ -n "${KEEP:-}" ]]; then
  logs="$KEEP"; mkdir -p "$logs"
else
  logs="$(mktemp -d /tmp/run_mode.XXXXXX)"; trap 'rm -rf "$logs"' EXIT
fi
work="$build/bench/mode-packages"
echo "run_mode.sh: start $(date -u +%FT%TZ), load: $(cat /proc/loadavg), threads $threads, batch $batch" >&2

# The MoE models' weights: TRAIN_STEPS steps of modrun train on the corpus.
weights="$logs/weights"; mkdir -p "$weights"
data=()
if (( train_steps > 0 )); then
  data=(--weights "$weights" --text "$corpus")
  mkdir -p "$work/trained"
  for m in mode_layer_mode mode_layer_moe mode_mode mode_moe; do
    echo "== training $m for $train_steps steps (modrun train)" >&2
    "$build/bin/modc" compile "$models/$m.json" --target cpu -o "$work/trained/$m" > "$logs/train-$m.log" 2>&1 \
      || { tail -5 "$logs/train-$m.log" >&2; exit 1; }
    "$build/runtime/modrun" train "$work/trained/$m" --data "$corpus" --out "$weights/$m.safetensors" \
      --steps "$train_steps" --batch "$batch" --lr 3e-3 --seed 1 >> "$logs/train-$m.log" 2>&1 \
      || { tail -5 "$logs/train-$m.log" >&2; exit 1; }
    grep -E '^(step '"$train_steps"'/|moe layer)' "$logs/train-$m.log" >&2
  done
fi

layers=mode_layer_mode,mode_layer_moe,mode_layer_stub,mode_layer_none
# ROUNDS rounds of the forward and training benchmarks, one after the other;
# each model's time is the median over the rounds of its per-round medians.
for r in $(seq 1 "$rounds"); do
  echo "== round $r: forward (bench_forward)" >&2
  "$build/bench/bench_forward" --models "$models" --work "$work/fwd" --batch "$batch" \
    --iters "$iters" --warmup "$warmup" --only "$layers" "${data[@]}" --interleave \
    2> >(tee "$logs/forward.$r.err" >&2) | tee "$logs/forward.$r.txt" >&2
  echo "== round $r: training step (bench_train)" >&2
  "$build/bench/bench_train" --models "$models" --work "$work/train" --batch "$batch" \
    --iters "$iters" --warmup "$warmup" \
    --only "mode_dense,mode_moe,mode_mode,$layers" "${data[@]}" --interleave \
    2> >(tee "$logs/train.$r.err" >&2) | tee "$logs/train.$r.txt" >&2
done

# The MoE MLP's own kernels, timed by the package (MODC_PROFILE=1), the two
# models interleaved, in ROUNDS rounds: a check of the subtraction above
# that carries no other layer's noise.
for r in $(seq 1 "$rounds"); do
  echo "== round $r: MoE MLP kernel profile" >&2
  MODC_PROFILE=1 "$build/bench/bench_forward" --models "$models" --work "$work/fwd" --batch "$batch" \
    --iters "$iters" --warmup "$warmup" --only mode_layer_mode,mode_layer_moe "${data[@]}" \
    --interleave > "$logs/profile.$r.txt" 2>&1
  MODC_PROFILE=1 "$build/bench/bench_train" --models "$models" --work "$work/train" --batch "$batch" \
    --iters "$iters" --warmup "$warmup" --only mode_layer_mode,mode_layer_moe "${data[@]}" \
    --interleave > "$logs/profile-grad.$r.txt" 2>&1
done

# bench_decode times the pair it calls model_dense and model_mod.
echo "== decode (bench_decode)" >&2
for pair in "dense mode" "moe mode"; do
  read -r a b <<< "$pair"
  d="$logs/decode-$a"; mkdir -p "$d"
  cp "$models/mode_$a.json" "$d/model_dense.json"
  cp "$models/mode_$b.json" "$d/model_mod.json"
  for m in "$a:model_dense" "$b:model_mod"; do
    [[ -f "$weights/mode_${m%%:*}.safetensors" ]] && cp "$weights/mode_${m%%:*}.safetensors" "$d/${m#*:}.safetensors"
  done
  "$build/bench/bench_decode" --models "$d" --work "$work/decode-$a" --weights "$d" \
    --corpus "$corpus" --prompt 128 --new "$new" --repeats 3 | tee "$logs/decode-$a.txt" >&2
done

: > "$logs/torch.jsonl"
if python3 -c "import torch" 2>/dev/null; then
  echo "== PyTorch (torch_mode.py)" >&2
  nc=""; [[ "${TORCH_COMPILE:-1}" == 0 ]] && nc="--no-compile"
  for m in mode_layer_mode mode_layer_moe; do
    python3 "$here/torch_mode.py" "$models/$m.json" --batch "$batch" --iters "$iters" \
      --warmup "$warmup" --threads "$threads" $nc 2>/dev/null | grep '^{' \
      | tee -a "$logs/torch.jsonl" >&2 || echo "torch: $m failed" >&2
  done
else
  echo "run_mode.sh: PyTorch not installed (pip install torch); no baseline" >&2
fi
echo "run_mode.sh: done $(date -u +%FT%TZ), load: $(cat /proc/loadavg)" >&2

python3 - "$logs" "$rounds" <<'EOF'
import json, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])

def table(path, cols):
    """Rows of a bench table: name -> [floats of columns cols]."""
    out = {}
    for line in open(path):
        f = line.split()
        if f and f[0].startswith("mode_"):
            try:
                out[f[0]] = [float(f[c]) for c in cols]
            except (ValueError, IndexError):
                pass
    return out

def over_rounds(stem, col):
    per = [{k: v[col] for k, v in table(f"{logs}/{stem}.{r}.txt", [1, 2]).items()}
           for r in range(1, rounds + 1)]
    out = {k: statistics.median(p[k] for p in per) for k in per[0]}
    spread = {k: [p[k] for p in per] for k in per[0]}
    return out, spread

# How each MoE layer decided the timed batch (bench_train's first round).
print("MoE layers' decisions of the timed batch (kept, no-op, dropped; rows by expert):")
for line in open(f"{logs}/train.1.err"):
    if " moe layer " in line:
        print("  " + line.strip())
print()

fwd, fwd_r = over_rounds("forward", 0)
step, step_r = over_rounds("train", 0)
grad, grad_r = over_rounds("train", 1)
print(f"rounds: {rounds}; per-round medians (ms):")
for name, t in (("forward", fwd_r), ("train step", step_r), ("grad", grad_r)):
    for k, v in t.items():
        print(f"  {name:10} {k:16} " + ", ".join(f"{x:.2f}" for x in v))

def decode(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0] in ("model_dense", "model_mod") and f[1] in ("1", "8"):
            out[(f[0], int(f[1]))] = float(f[2])
    return out

dd, dm = decode(f"{logs}/decode-dense.txt"), decode(f"{logs}/decode-moe.txt")
print("\n1. Whole models (4 layers)")
print(f"{'measure':34} {'dense':>9} {'MoE N=0':>9} {'MoDE 50%':>9} {'MoDE/MoE':>9} {'MoDE/dense':>10}")
s = step
print(f"{'training step (ms)':34} {s['mode_dense']:9.2f} {s['mode_moe']:9.2f} {s['mode_mode']:9.2f} "
      f"{s['mode_mode']/s['mode_moe']:9.3f} {s['mode_mode']/s['mode_dense']:10.3f}")
g = grad
print(f"{'  of which grad (ms)':34} {g['mode_dense']:9.2f} {g['mode_moe']:9.2f} {g['mode_mode']:9.2f} "
      f"{g['mode_mode']/g['mode_moe']:9.3f} {g['mode_mode']/g['mode_dense']:10.3f}")
for b in (1, 8):
    den, moe = dd[("model_dense", b)], dm[("model_dense", b)]
    mo1, mo2 = dd[("model_mod", b)], dm[("model_mod", b)]
    mo = (mo1 + mo2) / 2
    # times per token: MoDE / other = other's tokens/s / MoDE's tokens/s
    print(f"{f'decode batch {b} (tokens/s)':34} {den:9.1f} {moe:9.1f} {mo:9.1f} "
          f"{moe/mo:9.3f} {den/mo:10.3f}   (MoDE runs: {mo1:.1f}, {mo2:.1f})")
print("(ratios are time ratios: < 1 means MoDE is faster; decode's from tokens/s)")

print("\n2. The MoE MLP sublayer alone: 1-layer model minus the same layer with a width-1 dense MLP")
mlp = {}
for kind, t in (("forward", fwd), ("fwd+bwd (grad)", grad)):
    stub = t["mode_layer_stub"]
    a, b = t["mode_layer_mode"] - stub, t["mode_layer_moe"] - stub
    mlp[kind] = (a, b)
    if a > 0 and b > 0:
        r = a / b
        verdict = f"MoDE/MoE {r:.3f}   target <= 0.6: {'MET' if r <= 0.6 else 'MISSED'}"
    else:  # the stub timed slower than a layer: noise swamps the difference
        verdict = "MoDE/MoE n/a (a difference <= 0: too noisy to measure)"
    print(f"{kind:16} stub {stub:8.2f} ms  MoE N=0 {b:7.2f} ms  MoDE {a:7.2f} ms  {verdict}")
    print(f"{'':16} (whole 1-layer models: MoE {t['mode_layer_moe']:.2f} ms, MoDE "
          f"{t['mode_layer_mode']:.2f} ms, 0 layers {t['mode_layer_none']:.2f} ms)")

def mlp_profile(path):
    """Per model, the median over calls of the summed kernel times of the
    MoE MLP: its RMSNorm, the router product, the selection, the gathers,
    the experts' products and the scatter (kernels from two before
    modk.moe_select up to the final norm and the LM head, the last two).
    bench_forward --interleave marks each timed call with "bench call NAME
    timed" (and an untimed one without "timed": not counted)."""
    calls = {}
    current = None
    for line in open(path):
        if line.startswith("bench call "):
            f = line.split()
            current = None
            if f[-1] == "timed":
                current = calls.setdefault(f[2], [])
                current.append([])
        elif line.startswith("modc profile: kernel") and current is not None:
            f = line.split()
            current[-1].append((" ".join(f[4:-2]), float(f[-2])))
    out = {}
    for name, cs in calls.items():
        sums = []
        for c in cs:
            select = next(i for i, (k, _) in enumerate(c) if k == "modk.moe_select")
            sums.append(sum(ms for _, ms in c[select - 2:len(c) - 2]))
        out[name] = statistics.median(sums)
    return out

def grad_mlp_profile(path):
    """Per model, the median over timed training steps of the summed
    kernel times of the MoE MLP in the gradient entry (its first kernel
    sequence after the step's mark; AdamW's follows): forward from two
    before modk.moe_select to the final norm (two before the first
    modk.zero after the selection), backward from the kernel after the
    final norm's gradient (two after the first modk.gemm_wgrad, the LM
    head's) through the MLP norm's gradient (three after modk.moe_balance:
    the router's two products, then the norm)."""
    calls, current = {}, None
    for line in open(path):
        if line.startswith("bench call "):
            f = line.split()
            current = calls.setdefault(f[2], []) if f[-1] == "timed" else None
            if current is not None:
                current.append([])
        elif line.startswith("modc profile: kernel") and current is not None:
            f = line.split()
            if int(f[3]) == 0 and current[-1]:
                current = None  # the step's next entry (AdamW)
                continue
            current[-1].append((" ".join(f[4:-2]), float(f[-2])))
    out = {}
    for name, cs in calls.items():
        sums = []
        for c in cs:
            names = [k for k, _ in c]
            select = names.index("modk.moe_select")
            zero = names.index("modk.zero", select)
            wgrad = names.index("modk.gemm_wgrad")
            balance = names.index("modk.moe_balance")
            idx = list(range(select - 2, zero - 2)) + list(range(wgrad + 2, balance + 4))
            sums.append(sum(c[i][1] for i in idx))
        out[name] = statistics.median(sums)
    return out

def report_profile(label, parse, stem, what):
    """The MoDE / N = 0 ratio of the MLP's kernel sums (`parse` of each
    round's `stem` file), with each round's."""
    prof = [parse(f"{logs}/{stem}.{r}.txt") for r in range(1, rounds + 1)]
    prof = [p for p in prof if "mode_layer_mode" in p and "mode_layer_moe" in p]
    if not prof:
        return
    ratios = [p["mode_layer_mode"] / p["mode_layer_moe"] for p in prof]
    r = statistics.median(ratios)
    print(f"{label:16} MoE N=0 {statistics.median(p['mode_layer_moe'] for p in prof):7.2f} ms  "
          f"MoDE {statistics.median(p['mode_layer_mode'] for p in prof):7.2f} ms  MoDE/MoE {r:.3f}   "
          f"target <= 0.6: {'MET' if r <= 0.6 else 'MISSED'}")
    print(f"{'':16} ({what}; per round: " + ", ".join(f"{x:.3f}" for x in ratios) + ")")

report_profile("forward, profile", mlp_profile, "profile",
               "the MLP's kernels summed, median of calls")
report_profile("fwd+bwd, profile", grad_mlp_profile, "profile-grad",
               "the MLP's kernels in the gradient entry summed, median of steps")

rows = [json.loads(l) for l in open(f"{logs}/torch.jsonl") if l.startswith("{")]
if rows:
    print("\n3. The sublayer against PyTorch (ms; best = the faster formulation)")
    for m in ("mode_layer_mode", "mode_layer_moe"):
        r0 = next((r for r in rows if r["model"] == m and "kept" in r), None)
        if r0:
            print(f"{m}: PyTorch's router (random inputs and weights) keeps "
                  f"{100 * r0['kept']:.1f} %, no-op {100 * r0['noop']:.1f} %, "
                  f"dropped {100 * r0['dropped']:.1f} %")
    print(f"{'model':16} {'measure':8} {'mode':8} {'loop':>8} {'padded':>8} {'best':>8} {'ours':>8} {'torch/ours':>10}  target")
    names = {"mode_layer_mode": 0, "mode_layer_moe": 1}
    kinds = {"fwd": "forward", "fwd+bwd": "fwd+bwd (grad)"}
    for m in names:
        for meas in ("fwd", "fwd+bwd"):
            for mode in ("eager", "compile"):
                t = {r["form"]: r["ms"] for r in rows
                     if r["model"] == m and r["measure"] == meas and r["mode"] == mode}
                if not t:
                    continue
                best = min(t.values())
                ours = mlp[kinds[meas]][names[m]]
                if ours <= 0:
                    continue  # too noisy to measure (section 2 says so)
                x = best / ours
                need = 1.5 if mode == "eager" else 1.2
                tgt = f">= {need}x: {'MET' if x >= need else 'MISSED'}" if m == "mode_layer_mode" else ""
                print(f"{m:16} {meas:8} {mode:8} {t.get('loop', float('nan')):8.2f} "
                      f"{t.get('padded', float('nan')):8.2f} {best:8.2f} {ours:8.2f} {x:10.2f}  {tgt}")
EOF
