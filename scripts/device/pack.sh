#!/usr/bin/env bash
# Copies the built binaries (stripped) into .carry/bin, for running on a GPU machine that has no
# Debian packages (all of them, or those named: pack.sh sweetspot test_kernel_ops): Boost is linked statically; SQLite, OpenBLAS, cuBLAS and the CUDA driver are
# expected there. On that machine, point the tests at the copies:
#   export SWEETSPOT_BINARY=$PWD/.carry/bin/sweetspot SWEETSPOT_SOURCE_DIR=$PWD
# Stripped, the test binaries are tens of MB each and a run carries 64 MiB at most: with --xz first,
# they are also packed into .carry/pk/bin.tar.xz (about a third of the size); carry .carry/pk instead
# of .carry/bin, and gpu_session.sh unpacks it there.
set -euo pipefail
cd "$(dirname "$0")/../.."
xz=0
if [[ "${1:-}" == "--xz" ]]; then xz=1; shift; fi
rm -rf .carry/bin && mkdir -p .carry/bin
for f in build/sweetspot build/tests/test_* build/tests/bench_*; do
    name=$(basename "$f")
    [[ $# -gt 0 && ! " $* " =~ " $name " ]] && continue
    [[ -x "$f" && -f "$f" ]] && strip -o ".carry/bin/$name" "$f"
done
if ((xz)); then
    mkdir -p .carry/pk
    tar -C .carry -cf - bin | xz -6 -T2 > .carry/pk/bin.tar.xz
    du -sh .carry/pk/bin.tar.xz
else
    du -sh .carry/bin
fi
