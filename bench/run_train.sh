#!/usr/bin/env bash
#===- run_train.sh - modc training-step benchmark beside PyTorch ---------===#
#
# Runs `bench/torch_mod.py --train` (eager and torch.compile) on every model
# of bench/models, then bench_train on the same models, which prints one
# table with both and the ratios: routed layer / dense layer, MoD model step
# / dense model step (target <= 0.6), ours vs PyTorch eager (target >= 1.5x).
# The same as `bench/run.sh --train`, which does the work.
#
# Usage: bench/run_train.sh [BUILD_DIR]     (default: build)
# Environment: BATCH (4), ITERS (5), WARMUP (2), TORCH_COMPILE=0 to skip
# torch.compile, MODELS="layer_dense,..." to run a subset,
# TORCH_OUT=FILE to keep the PyTorch results (JSON lines).
#
#===-----------------------------------------------------------------------===#
exec "$(dirname "$0")/run.sh" --train "$@"
