#!/usr/bin/env bash
# Runs experiments/sanitize.toml (the tiny_odd model through every GPU backend and dtype) under
# compute-sanitizer's memcheck, racecheck and synccheck, following every cell process
# (--target-processes all), and prints one line per tool: the errors the sanitizer reported and
# how the cells ended. The sanitizer's report and the sweep's output go to $OUT/sanitize-TOOL.log.
#   scripts/device/sanitize.sh [TOOL...] [-- RUN_ARGS...]   (default: memcheck racecheck synccheck)
# RUN_ARGS go to `sweetspot run`, e.g. `-- --only model=tiny_hd64 --only dtype=fp32` for a slice.
# SWEETSPOT_BINARY names the binary (default build/sweetspot); COMPUTE_SANITIZER the sanitizer.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${SWEETSPOT_BINARY:-build/sweetspot}
sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
out=${OUT:-out}
mkdir -p "$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tools=()
while [[ $# -gt 0 && "$1" != "--" ]]; do tools+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
[[ ${#tools[@]} -eq 0 ]] && tools=(memcheck racecheck synccheck)

status=0
for tool in "${tools[@]}"; do
    # CUPTI and the sanitizer cannot share a process: --collector none.
    "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 99 --log-file "$scratch/$tool.%p.log" \
        "$bin" run experiments/sanitize.toml --db "$scratch/$tool.db" --collector none "$@" > "$scratch/$tool.out" 2>&1
    rc=$?
    # One report for the whole process tree: the front end counts every cell process's errors in
    # its single ERROR SUMMARY (checked with a planted out-of-bounds write in a forked child).
    cat "$scratch/$tool".*.log "$scratch/$tool.out" > "$out/sanitize-$tool.log"
    # memcheck and synccheck end with "ERROR SUMMARY: N errors", racecheck with "(N errors, ...".
    counts=$(grep -ohE "ERROR SUMMARY: [0-9]+|\([0-9]+ errors" "$scratch/$tool".*.log | grep -oE "[0-9]+")
    errors=$(echo "$counts" | awk '{n += $1} END {print n + 0}')
    [[ -n "$counts" ]] || errors="no summary (the sanitizer did not finish)"
    summary=$(tail -3 "$scratch/$tool.out" | grep -E "[0-9]+ ok" | head -1)
    echo "$tool: $errors errors; run exit $rc; $summary"
    [[ "$errors" == 0 && $rc -eq 0 ]] || status=1
done
exit $status
