#!/usr/bin/env bash
# The main demo. On a fresh Debian 12 machine, as root:
#
#   scripts/demo.sh             installs the dependencies, builds modc and
#                               modrun into build/, then runs
#   scripts/demo.sh --no-build  uses the tools already built in build/
#
# It compiles examples/tiny-mod.json into a CPU package, initialises weights,
# turns real text (Debian's fortunes corpus) into byte-level tokens, runs the
# forward pass in both routing modes and prints what the routers did, then
# trains the model for 200 steps and samples from it. Every file it writes
# goes to out/.
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
for arg in "$@"; do
  case "$arg" in
  --no-build) build=0 ;;
  -h | --help)
    sed -n '2,12s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  *)
    echo "demo: unknown argument '$arg' (try --help)" >&2
    exit 2
    ;;
  esac
done

modc=build/bin/modc
modrun=build/runtime/modrun
model=examples/tiny-mod.json
corpus=/usr/share/games/fortunes/fortunes
batch=4
train_batch=8
train_steps=200
sample_prompt="A fool and his "
out=out

step() { printf '\n==> %s\n' "$*"; }
show_run() {
  printf '$ %s\n' "$*"
  "$@"
}
die() {
  echo "demo: error: $*" >&2
  exit 1
}

if ((build)); then
  step "Installing dependencies (scripts/install-deps.sh)"
  scripts/install-deps.sh
  # Only what the demo runs; scripts/test.sh builds the rest into the same
  # build/ (and a demo after it finds these up to date).
  step "Building modc and modrun (scripts/build.sh --tools)"
  scripts/build.sh --tools
fi
[[ -x $modc && -x $modrun ]] ||
  die "$modc or $modrun is missing; run scripts/demo.sh without --no-build"
[[ -r $corpus ]] ||
  die "$corpus is missing; install the 'fortunes' package (scripts/install-deps.sh)"
mkdir -p "$out"

step "Compiling $model into a CPU package"
show_run "$modc" compile "$model" --target cpu -o "$out/tiny-mod"
show_run "$modrun" info "$out/tiny-mod" | tee "$out/info.txt"
seq_len=$(sed -n 's/^shape: *seq_len \([0-9]*\),.*/\1/p' "$out/info.txt")
[[ -n $seq_len ]] || die "cannot read seq_len from 'modrun info'"

step "Initialising weights (seed 1)"
show_run "$modrun" init "$out/tiny-mod" --seed 1 --out "$out/weights.safetensors"

step "Tokenizing $batch x $seq_len bytes of $corpus"
show_run "$modrun" tokenize "$corpus" --seq-len "$seq_len" --batch "$batch" \
  --out "$out/tokens.safetensors"
echo "first sequence begins:"
head -c "$seq_len" "$corpus" | head -n 3 | sed 's/^/  | /'

for mode in topk causal; do
  step "Forward pass, mode $mode"
  show_run "$modrun" forward "$out/tiny-mod" --weights "$out/weights.safetensors" \
    --tokens "$out/tokens.safetensors" --mode "$mode" \
    --out "$out/forward-$mode.safetensors"
  show_run "$modrun" show "$out/forward-$mode.safetensors" |
    tee "$out/forward-$mode.txt"
done

step "Summary"
# Shape of one tensor from a 'modrun show' listing.
shape_of() { sed -n "s/^  $2 *[A-Z0-9]* *\(\[[0-9, ]*\]\).*/\1/p" "$1"; }
echo "tokens:  I32 $(shape_of <("$modrun" show "$out/tokens.safetensors") tokens)" \
  "(bytes of $corpus)"
echo "logits:  F32 $(shape_of "$out/forward-topk.txt" logits)"
total=$((batch * seq_len))
status=0
echo "routed tokens per routed layer ($batch sequences x $seq_len tokens):"
printf '  %-6s %-9s %-17s %s\n' layer capacity 'mode topk' 'mode causal'
while read -r layer k; do
  row=$(printf '  %-6s %-9s' "$layer" "$k/$seq_len")
  for mode in topk causal; do
    mean=$(sed -n "s/^  routed\.$layer .* mean \([^ ]*\) .*/\1/p" "$out/forward-$mode.txt")
    [[ -n $mean ]] || die "no routed.$layer in $out/forward-$mode.safetensors"
    routed=$(awk -v m="$mean" -v n="$total" 'BEGIN { printf "%d", m * n + 0.5 }')
    pct=$(awk -v m="$mean" 'BEGIN { printf "%.1f%%", 100 * m }')
    row+=$(printf ' %-17s' "$routed/$total = $pct")
    if [[ $mode == topk && $routed -ne $((batch * k)) ]]; then
      echo "demo: error: layer $layer routed $routed tokens in topk mode;" \
        "expected $batch x $k = $((batch * k))" >&2
      status=1
    fi
  done
  echo "$row" | sed 's/ *$//'
done < <(sed -n 's/^  layer *\([0-9]*\) *routed *capacity \([0-9]*\)\/.*/\1 \2/p' "$out/info.txt")
echo "topk routes k = ceil(capacity * seq_len) tokens of each sequence, so the"
echo "fraction is k/seq_len exactly; causal routes each token on its own by the"
echo "sign of the (untrained) predictor, so its fraction is not fixed."

step "Training on $corpus ($train_steps steps, batch $train_batch)"
show_run "$modrun" train "$out/tiny-mod" --data "$corpus" --steps "$train_steps" \
  --batch "$train_batch" --lr 3e-3 --seed 1 --eval-every 50 \
  --out "$out/tiny-mod.ckpt.safetensors" --log "$out/train.csv"
first=$(awk -F, 'NR == 2 { print $2 }' "$out/train.csv")
last=$(awk -F, 'NR > 1 { l = $2 } END { print l }' "$out/train.csv")
heldout=$(awk -F, 'NR > 1 && $8 != "" { e = $8 } END { print e }' "$out/train.csv")
echo "training loss: step 1 $first -> step $train_steps $last; held-out loss $heldout"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  die "training loss did not fall by at least 1 nat ($first -> $last)"

step "Forward pass with the trained weights, mode causal"
show_run "$modrun" forward "$out/tiny-mod" --weights "$out/tiny-mod.ckpt.safetensors" \
  --tokens "$out/tokens.safetensors" --mode causal \
  --out "$out/forward-trained-causal.safetensors"
show_run "$modrun" show "$out/forward-trained-causal.safetensors"
echo "(the trained predictor routes about capacity x seq_len tokens causally)"

step "Sampling from the trained model (KV cache, causal routing, seed 1)"
show_run "$modrun" sample "$out/tiny-mod" --weights "$out/tiny-mod.ckpt.safetensors" \
  --prompt "$sample_prompt" --max-new 120 --temperature 0.8 --top-k 40 --seed 1 |
  tee "$out/sample.txt"
[[ -s $out/sample.txt ]] || die "modrun sample printed nothing"
exit $status
