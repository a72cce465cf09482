#!/usr/bin/env bash
# On a GPU machine, from the repository root with the binaries in .carry/bin (scripts/device/pack.sh):
#   gpu_session.sh tests                      [gpu] tests of every binary
#   gpu_session.sh sweep MATRIX [ARGS...]     `sweetspot run MATRIX ARGS...` (stopped after $SWEEP_SECONDS, if
#                                             set, and exported all the same) into <matrix name>.db under
#                                             $SWEEP_DIR (default /tmp/sweetspot-sweeps; later sweeps of the
#                                             same matrix add to it), exported to $OUT as one file, gzipped when
#                                             large (scripts/device/export_db.py), with its summary
# Logs and databases go to $OUT (or ./out). Prints a short result line per step.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
export SWEETSPOT_BINARY=$PWD/.carry/bin/sweetspot SWEETSPOT_SOURCE_DIR=$PWD
bin=$PWD/.carry/bin
# Binaries packed with pack.sh --xz come as one archive.
if [[ ! -d "$bin" && -f .carry/pk/bin.tar.xz ]]; then tar -C .carry -xJf .carry/pk/bin.tar.xz; fi

case "${1:-}" in
tests)
    for t in "$bin"/test_*; do
        name=$(basename "$t")
        "$t" "[gpu]" --allow-running-no-tests > "$out/$name-gpu.log" 2>&1
        rc=$?
        echo "$name [gpu]: rc $rc, $(grep -E '^(All tests passed|test cases:|No tests ran)' "$out/$name-gpu.log" | head -1)"
        grep -E "FAILED|error" -A3 "$out/$name-gpu.log" | head -20
    done
    ;;
sweep)
    matrix=$2
    shift 2
    name=$(basename "$matrix" .toml)
    sweeps=${SWEEP_DIR:-/tmp/sweetspot-sweeps}
    mkdir -p "$sweeps"
    # SWEEP_SECONDS: stop the sweep (SIGTERM: the cell in flight ends, the database stays whole)
    # after that long, so that it is still exported before the lease's limit cuts everything.
    limit=()
    if [[ -n "${SWEEP_SECONDS:-}" ]]; then limit=(timeout --signal=TERM "$SWEEP_SECONDS"); fi
    "${limit[@]}" "$bin/sweetspot" run "$matrix" --db "$sweeps/$name.db" "$@" >> "$out/$name.log" 2>&1
    echo "sweep $name: rc $? ($(grep -c '\] ok' "$out/$name.log") ok lines); $(tail -2 "$out/$name.log" | head -1)"
    "$bin/sweetspot" summary "$sweeps/$name.db" > "$out/$name-summary.txt" 2>&1
    grep -vE "^\s*[0-9]+ .* ok " "$out/$name-summary.txt" | tail -25
    python3 scripts/device/export_db.py "$out" "$sweeps/$name.db"
    ;;
*)
    echo "usage: $0 tests | sweep MATRIX [ARGS...]" >&2
    exit 2
    ;;
esac
