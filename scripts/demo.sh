#!/usr/bin/env bash
# The quick start: installs what is missing, builds, sweeps experiments/demo.toml on the host
# backend (no GPU needed) into results/demo.db, prints the summary, and writes the report into
# results/demo-report/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The demo measures afresh each time (a database from an older sweetspot may have another schema).
rm -f results/demo.db results/demo.db-wal results/demo.db-shm
status=0
# The run's own table of its cells is left out: the summary below prints it with the rest.
build/sweetspot run experiments/demo.toml --db results/demo.db > /dev/null || status=$?
echo
build/sweetspot summary results/demo.db
echo
rm -rf results/demo-report
if build/sweetspot report results/demo.db -o results/demo-report; then
    echo
    echo "Report: $PWD/results/demo-report/index.html"
else
    status=$?
fi
exit $status
