#!/usr/bin/env python3
"""`sweetspot estimate --fit` against runs at the limit (issue 15): for each cell of a matrix taken as a
template, the largest batch the estimator says fits the GPU (B), then that cell run at B, B + 1 and B + 2
(`--set batch=B,B+1,B+2 --force`, the last two predicted OOM). The answer holds when it is within one
batch step of the largest batch that runs: B runs and B + 2 does not; it is exact when B + 1 does not run
either. Prints one row per template and the number that hold.

A `uvm` or `uvm-prefetch` cell does not fail when its allocations leave no room for the weights its
budget keeps on the GPU: the driver evicts them to make room, and the cell runs, but not under its
budget. So these cells run with one traced iteration, and one whose trace holds device-to-host
migrations the driver made to evict (CUPTI's migration cause "eviction") counts as not running as
configured. On an H100 the GPT-2 1.5B bf16 cells at 50 % showed none at batch 432 and 1.4-1.7 GB at 433.

Usage: fit_check.py MATRIX --calibration DB [--capacity 80GiB] [--only AXIS=VALUE ...] [--db OUT] [--dry-run]
The calibration database is one of the same GPU and driver (its cells measure the CUDA context and
libraries). The capacity is the memory CUDA says the GPU has (cudaGetDeviceProperties' totalGlobalMem, which
the runner compares predictions with and stores as runs.gpu_memory_bytes; on an H100 80GB 81,079 MiB, not
the 81,559 MiB nvidia-smi shows, which includes memory the driver reserves); by default the calibration
database's. Runs go to OUT (default
fit-check.db). --dry-run prints the commands instead of running them. SWEETSPOT_BINARY names the binary
(default build/sweetspot).
"""
import argparse
import json
import os
import pathlib
import shlex
import sqlite3
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "analysis"))
from axes import Axes  # noqa: E402

# The backends whose weights are managed memory, which the driver may evict under pressure.
MANAGED = ("uvm", "uvm-prefetch")
# CUPTI's CUpti_ActivityUnifiedMemoryMigrationCause for a migration the driver made to evict.
EVICTION = 4



def sweetspot():
    return os.environ.get("SWEETSPOT_BINARY", "build/sweetspot")


def default_capacity(calibration):
    con = sqlite3.connect(f"file:{calibration}?mode=ro", uri=True)
    (capacity,) = con.execute("SELECT max(gpu_memory_bytes) FROM runs").fetchone()
    con.close()
    if capacity is None:
        sys.exit(f"fit_check.py: {calibration} records no GPU memory (runs.gpu_memory_bytes); give --capacity")
    return f"{capacity}B"


def template_axes(calibration):
    """The axes a template's cells are picked by (`--only`): those a matrix sets that decide what is
    computed and where it runs (the workload and placement axes), but the batch, which is searched.
    Their columns, the keys of `estimate --format json`, are their names."""
    con = sqlite3.connect(f"file:{calibration}?mode=ro", uri=True)
    rows = Axes.of(con).rows
    con.close()
    return [column for column, role, in_matrix, _ in rows
            if in_matrix and role in ("workload", "placement") and column != "batch"]


def fits(args):
    """The templates: each cell's template axes and its largest batch, or None."""
    command = [sweetspot(), "estimate", args.matrix, "--calibration", args.calibration, "--fit", args.capacity,
               "--format", "json"]
    for only in args.only:
        command += ["--only", only]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    names = template_axes(args.calibration)
    seen = set()
    for row in json.loads(out):
        axes = {k: row[k] for k in names}
        # Cells that differ only in batch share one template.
        key = json.dumps(axes, sort_keys=True)
        if key not in seen:
            seen.add(key)
            yield axes, row["largest_batch"]


def run_at_limit(args, axes, batch):
    batches = ",".join(str(b) for b in range(batch, batch + 3))
    command = [sweetspot(), "run", args.matrix, "--db", args.db, "--force", "--set", f"batch={batches}"]
    if axes.get("backend") in MANAGED:
        command += ["--set", "trace_iterations=1"]  # its trace records the driver's evictions
    for axis, value in axes.items():
        command += ["--only", f"{axis}={str(value).lower() if isinstance(value, bool) else value}"]
    if args.dry_run:
        print(shlex.join(command))
        return
    subprocess.run(command, capture_output=True, text=True)


def driver_evicted_bytes(con, cell_id):
    """Bytes the driver migrated to the host to evict, in the cell's traced iterations."""
    (evicted,) = con.execute("SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                             "WHERE cell_id = ? AND migrationCause = ?", (cell_id, EVICTION)).fetchone()
    return evicted


def outcome(db, axes, batch):
    """How the cell at `batch` in `db` ran, by its shown axes: (whether it ran as configured, what to
    show)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    where = " AND ".join(f'"{axis}" = ?' for axis in axes) or "1"
    row = con.execute(f"SELECT cell_id, status FROM cells WHERE batch = ? AND {where} ORDER BY cell_id DESC LIMIT 1",
                      [batch, *[int(v) if isinstance(v, bool) else str(v) for v in axes.values()]]).fetchone()
    if row is None:
        con.close()
        return False, "not run"
    cell_id, status = row
    evicted = driver_evicted_bytes(con, cell_id) if status == "ok" and axes.get("backend") in MANAGED else 0
    con.close()
    if evicted:
        return False, f"ok, budget not held ({evicted / 2**20:,.0f} MiB evicted by the driver)"
    return status == "ok", status


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix")
    parser.add_argument("--calibration", required=True)
    parser.add_argument("--capacity")
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--db", default="fit-check.db")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    args.capacity = args.capacity or default_capacity(args.calibration)

    held, templates = 0, list(fits(args))
    # A template is named by the axes the templates differ in.
    named = [k for k in (templates[0][0] if templates else {}) if len({str(t[k]) for t, _ in templates}) > 1]
    if not args.dry_run:
        print("| cell | largest batch | at it | one more | two more | --fit |")
        print("|---|---|---|---|---|---|", flush=True)
    for axes, batch in templates:
        cell = " ".join(f"{k}={axes[k]}" for k in named or ("model", "backend"))
        if batch is None:
            if not args.dry_run:
                print(f"| {cell} | none | - | - | - | no batch fits |", flush=True)
            continue
        run_at_limit(args, axes, batch)
        if args.dry_run:
            continue
        (at_ran, at), (one_ran, one), (two_ran, two) = (outcome(args.db, axes, b) for b in range(batch, batch + 3))
        ok = at_ran and not two_ran
        held += ok
        verdict = ("holds, one step under" if one_ran else "holds, exact") if ok else "misses"
        # Each row as soon as its runs end: a long check that is cut short keeps what it found.
        print(f"| {cell} | {batch} | {at} | {one} | {two} | {verdict} |", flush=True)
    if args.dry_run:
        return 0
    print(f"\n{held} of {len(templates)} --fit answers hold (the batch runs, two up does not).")
    return 0 if held == len(templates) else 1


if __name__ == "__main__":
    sys.exit(main())
