"""Checks of weight-copies-emulated.test on the traces that
MODC_CUDA_TRACE_GEMMS writes during `modrun train`: `roundings COPIES F32`
passes when the package with bf16 copies rounded weights in its first step
only (its first call, and the first AdamW step making the copies that only
decode reads) and the --f32-weights package rounded weights in every step
after the first too."""
import sys


def roundings_by_step(path):
    """Weight roundings before the first progress line ("step 1/N"), and
    between each progress line and the next."""
    counts = [0]
    for line in open(path):
        if line.startswith("step "):
            counts.append(0)
        elif "rounded into its bf16 copy" in line:
            counts[-1] += 1
    return counts[:-1]  # after the last step: the checkpoint only


def main():
    if sys.argv[1] != "roundings":
        sys.exit(f"unknown check {sys.argv[1]}")
    copies = roundings_by_step(sys.argv[2])
    f32 = roundings_by_step(sys.argv[3])
    print(f"weight roundings by step: {copies} with copies, {f32} with "
          f"--f32-weights")
    if len(copies) < 3 or len(f32) != len(copies):
        sys.exit("expected the same three or more steps in both traces")
    if copies[0] == 0 or any(copies[1:]):
        sys.exit("with copies, only the first step should round weights")
    if not all(f32):
        sys.exit("with --f32-weights, every step should round weights")


main()
