#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test. Tests tagged [gpu] run only where a GPU
# is visible; elsewhere they are excluded, and this script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    echo "test: GPU found, running all tests including [gpu]"
    ctest --test-dir build --output-on-failure -j "$(nproc)"
else
    echo "test: no GPU on this machine: the [gpu] tests are excluded (ctest -LE gpu)"
    ctest --test-dir build --output-on-failure -j "$(nproc)" -LE gpu
fi
