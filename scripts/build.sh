#!/usr/bin/env bash
# Configures build/ (Release) and builds into it.
#
#   scripts/build.sh          everything: the tools, the tests, the benchmarks
#                             (what scripts/test.sh and CI run)
#   scripts/build.sh --tools  only the compiler `modc` and the runtime CLI
#                             `modrun` (with its communicator plugins): what
#                             scripts/demo.sh runs
#
# Both configure build/ the same way, so either reuses what the other built.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=()
for arg in "$@"; do
  case "$arg" in
  --tools) targets=(modc modrun) ;;
  -h | --help)
    sed -n '2,10s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
  *)
    echo "build: unknown argument '$arg' (try --help)" >&2
    exit 2
    ;;
  esac
done

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
if ((${#targets[@]})); then
  cmake --build build -j"$(nproc)" --target "${targets[@]}"
else
  cmake --build build -j"$(nproc)"
fi
