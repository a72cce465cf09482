#!/usr/bin/env python3
"""The memory estimator's error table of docs/benchmarks.md from results databases (schema 6 on).

Per backend and variant, over the ok GPU cells with NVML's measured peak (the view memory_accuracy):
the cells, the largest and the median |error| of the predicted peak against the measured one, and
of the predicted allocations against the harness's own accounting of them. A second table splits
the measured peak where it can be split: the CUDA context (NVML, right after it is created), the
cell's allocations (the harness's accounting), and what is left (the libraries' code and pools,
and for the UVM backends the managed pages the driver kept on the device beyond the budget).
Cells that ran beside another process are counted: their peak may include its allocations.
A third table gives the peak's error per model and dtype. A fourth sets the predicted peak host
memory against the cell process's peak resident memory (the view host_memory_accuracy, schema 9
on), per backend, split by whether the cell's check ran its host reference forward.
Usage: memory_table.py DB [DB ...]
"""
import argparse
import sqlite3
import statistics
from collections import defaultdict

MIB = 2**20
QUERY = """
SELECT backend, variant, peak_error_pct, alloc_error_pct, gpu_peak_bytes, allocated_bytes, gpu_context_bytes,
       gpu_other_processes, model, dtype
FROM memory_accuracy
"""
HOST_QUERY = """
SELECT backend, check_reference_computed, host_error_pct, peak_host_rss_bytes
FROM host_memory_accuracy
"""


def rows(dbs, query=QUERY, view="memory_accuracy"):
    for db in dbs:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        if con.execute("SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = ?", (view,)).fetchone():
            yield from con.execute(query)
        con.close()


def abs_stats(values):
    """(largest, median) of |values| over those that are not None, or None."""
    present = [abs(v) for v in values if v is not None]
    return (max(present), statistics.median(present)) if present else None


def pct(stats, which):
    return "–" if stats is None else f"{stats[which]:.2f} %"


def mib_range(values):
    return f"{min(values) / MIB:,.1f}–{max(values) / MIB:,.1f}" if values else "–"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", nargs="+")
    a = p.parse_args()
    groups = defaultdict(list)
    for row in rows(a.db):
        groups[(row[0], row[1])].append(row)
    if not groups:
        print("no GPU cell with both a prediction and NVML's measured peak (memory_accuracy is empty)")
        return
    print("| backend | variant | cells | peak: max |error| | peak: median |error| | allocations: max |error| "
          "| beside other processes |")
    print("|---|---|---|---|---|---|---|")
    everything = []
    for (backend, variant), cells in sorted(groups.items()):
        everything += cells
        peak, alloc = abs_stats([c[2] for c in cells]), abs_stats([c[3] for c in cells])
        beside = sum(1 for c in cells if c[7])
        print(f"| {backend} | {variant} | {len(cells)} | {pct(peak, 0)} | {pct(peak, 1)} | {pct(alloc, 0)} | {beside} |")
    peak, alloc = abs_stats([c[2] for c in everything]), abs_stats([c[3] for c in everything])
    print(f"| all | | {len(everything)} | {pct(peak, 0)} | {pct(peak, 1)} | {pct(alloc, 0)} | "
          f"{sum(1 for c in everything if c[7])} |")
    print()
    print("| backend | measured peak MiB | CUDA context MiB | allocations MiB | the rest MiB |")
    print("|---|---|---|---|---|")
    by_backend = defaultdict(list)
    for c in everything:
        by_backend[c[0]].append(c)
    for backend, cells in sorted(by_backend.items()):
        rest = [c[4] - c[5] - c[6] for c in cells]
        print(f"| {backend} | {mib_range([c[4] for c in cells])} | {mib_range([c[6] for c in cells])} | "
              f"{mib_range([c[5] for c in cells])} | {mib_range(rest)} |")
    print()
    print("| model | dtype | cells | peak: max |error| | peak: median |error| |")
    print("|---|---|---|---|---|")
    by_model = defaultdict(list)
    for c in everything:
        by_model[(c[8], c[9])].append(c)
    for (model, dtype), cells in sorted(by_model.items()):
        peak = abs_stats([c[2] for c in cells])
        print(f"| {model} | {dtype} | {len(cells)} | {pct(peak, 0)} | {pct(peak, 1)} |")
    host_table(a.db)


def host_table(dbs):
    groups = defaultdict(list)
    for backend, computed, error, rss in rows(dbs, HOST_QUERY, "host_memory_accuracy"):
        groups[(backend, "ran" if computed else "reused")].append((error, rss))
    print()
    if not groups:
        print("no GPU cell with both a predicted and a measured peak host memory (host_memory_accuracy is empty)")
        return
    print("| backend | host reference | cells | host peak: max |error| | median |error| | measured MiB |")
    print("|---|---|---|---|---|---|")
    for (backend, reference), cells in sorted(groups.items()):
        err = abs_stats([c[0] for c in cells])
        print(f"| {backend} | {reference} | {len(cells)} | {pct(err, 0)} | {pct(err, 1)} | "
              f"{mib_range([c[1] for c in cells])} |")


if __name__ == "__main__":
    main()
