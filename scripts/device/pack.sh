#!/usr/bin/env bash
# Copies the built binaries (stripped) into .carry/bin, for running on a GPU machine that has no
# Debian packages (all of them, or those named: pack.sh sweetspot test_kernel_ops): Boost is linked statically; SQLite, OpenBLAS, cuBLAS and the CUDA driver are
# expected there. On that machine, point the tests at the copies:
#   export SWEETSPOT_BINARY=$PWD/.carry/bin/sweetspot SWEETSPOT_SOURCE_DIR=$PWD
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .carry/bin && mkdir -p .carry/bin
for f in build/sweetspot build/tests/test_* build/tests/bench_*; do
    name=$(basename "$f")
    [[ $# -gt 0 && ! " $* " =~ " $name " ]] && continue
    [[ -x "$f" && -f "$f" ]] && strip -o ".carry/bin/$name" "$f"
done
du -sh .carry
