#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test
# (lit/FileCheck compiler tests and GoogleTest runtime and numerics tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
