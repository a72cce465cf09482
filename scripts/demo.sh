#!/usr/bin/env bash
# The quick start: installs what is missing, builds, sweeps experiments/demo.toml on the host
# backend (no GPU needed) into results/demo.db, and prints the summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# The demo measures afresh each time (a database from an older sweetspot may have another schema).
rm -f results/demo.db results/demo.db-wal results/demo.db-shm
status=0
build/sweetspot run experiments/demo.toml --db results/demo.db || status=$?
echo
build/sweetspot summary results/demo.db
exit $status
