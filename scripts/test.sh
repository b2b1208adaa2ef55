#!/usr/bin/env bash
# The test command: installs dependencies, builds, and runs every test
# (lit/FileCheck compiler tests and GoogleTest runtime and numerics tests),
# then the runtime, numerics and CLI tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer (scripts/test-sanitizers.sh, which uses the
# compiler just built; docs/testing.md). MODC_TEST_SANITIZERS=0 skips that.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
if [[ ${MODC_TEST_SANITIZERS:-1} != 0 ]]; then
  scripts/test-sanitizers.sh
fi
