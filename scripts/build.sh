#!/usr/bin/env bash
# Configures and builds sweetspot into build/ (the CUDA parts when a toolkit is found).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" > build-configure.log 2>&1 ||
    { cat build-configure.log; exit 1; }
grep -E "sweetspot:|CMake Warning" -A2 build-configure.log || true
rm -f build-configure.log
cmake --build build -j "$jobs"
