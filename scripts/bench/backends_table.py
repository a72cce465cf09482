#!/usr/bin/env python3
"""The backend benchmark table (docs/benchmarks.md) from a results database.

For each ok GPU cell: its median latency, the bound
    bound = max(streamed_bytes / measured pinned H2D bandwidth, `device` latency of the same workload)
and the ratio median / bound; for `uvm` and `uvm-prefetch` cells also the driver bound (the
bytes the cell moves at its run's ceiling for each operation: the managed-memory probe's rate, or
the best rate a cell of the run achieved where that is higher, analysis/bound.py) and the ratio
median / driver bound. A ratio below 1 (a cell faster than a bound, which a floor must not allow)
is marked "!" and counted under the table. streamed_bytes are the weights the backend could not keep resident
under the cell's budget (all weights for on-demand `uvm`, whose LRU eviction misses every access
under cyclic layer order). Several databases may be given (e.g. one per sweep); a `device` cell
in any of them serves as the reference for the same workload in all. --best keeps, per model, dtype,
batch × seq, backend and budget, only the fastest setting (lowest median): the best setting of each
backend at each budget. A setting measured more than once (`repeat`, or in several databases) is
represented by its median repeat, the slower of the middle two for an even count, so the best of
noisy repeats is not mistaken for the setting's speed.
Usage: backends_table.py DB [DB ...] [--markdown] [--best]
"""
import argparse
import pathlib
import sqlite3
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "analysis"))
from axes import Axes  # noqa: E402
from bound import beats, bound_ms, device_latencies, driver_bound_ms, driver_ceilings, managed_rates  # noqa: E402

QUERY = """
SELECT c.*, r.h2d_gbps, r.d2h_gbps FROM cells c JOIN runs r USING (run_id)
WHERE c.status = 'ok' AND c.backend != 'host'
"""
# Measures that later schema versions added, unknown for the cells of an older file.
ADDED_MEASURES = {"streamed_bytes": None, "streamed_gbps": None, "device_weight_bytes": None, "resident_bytes": None}

COLUMNS = ["model", "dtype", "b×s", "backend", "prefetch", "streams", "budget", "resident", "evict", "launch",
           "streamed GB",
           "median ms", "p10–p90 ms", "bound ms", "× bound", "driver bound ms", "× driver bound", "link GB/s", "rel err"]


def shared(columns, more):
    """The columns of `columns` that `more` has too, in their order (None: no databases yet)."""
    return more if columns is None else tuple(c for c in columns if c in more)


def ratio(latency, bound):
    """latency ÷ bound as the table shows it, "!" after one below 1; "-" without a bound."""
    if not bound:
        return "-"
    return f"{latency / bound:.2f}" + ("!" if beats(latency / bound) else "")


def rows(dbs):
    cells = []  # (cell, its database's driver ceilings): run ids repeat across databases
    # What the databases' axes say a workload is, and a setting (what is computed and how it runs).
    workload = identity = None
    for db in dbs:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        con.row_factory = sqlite3.Row
        axes = Axes.of(con)
        workload, identity = shared(workload, axes.workload), shared(identity, axes.identity)
        mine = [axes.fill_missing(dict(ADDED_MEASURES, **dict(c))) for c in con.execute(QUERY).fetchall()]
        ceilings = driver_ceilings([c for c in mine if c["latency_median_ms"] is not None], managed_rates(con))
        cells += [(c, ceilings) for c in mine]
    device_ms = device_latencies([c for c, _ in cells], workload)
    cells.sort(key=lambda cr: (cr[0]["model"], cr[0]["dtype"], cr[0]["seq"], cr[0]["backend"], cr[0]["prefetch"],
                               cr[0]["streams"], cr[0]["budget_bytes"], cr[0]["resident"], cr[0]["evict"],
                               cr[0]["launch"]))
    for c, ceilings in cells:
        bound = bound_ms(c, device_ms, workload)
        driver = driver_bound_ms(c, device_ms, ceilings, workload)
        pct = 100.0 * c["budget_bytes"] / c["weight_bytes"]
        setting = tuple(c[k] for k in identity)
        yield c["latency_median_ms"], setting, [
            c["model"], c["dtype"], f'{c["batch"]}×{c["seq"]}', c["backend"], c["prefetch"], str(c["streams"]),
            f"{pct:.0f}%", c["resident"], c["evict"], c["launch"],
            f'{(c["streamed_bytes"] or 0) / 1e9:.2f}', f'{c["latency_median_ms"]:.1f}',
            f'{c["latency_p10_ms"]:.1f}–{c["latency_p90_ms"]:.1f}',
            f"{bound:.1f}" if bound else "-", ratio(c["latency_median_ms"], bound),
            f"{driver:.1f}" if driver else "-", ratio(c["latency_median_ms"], driver),
            f'{c["streamed_gbps"]:.1f}' if c["streamed_gbps"] else "-",
            f'{c["check_rel_err"]:.1e}' if c["check_rel_err"] is not None else "-",
        ]


def best(rows_with_settings):
    """The row of the fastest setting of each (model, dtype, b×s, backend, budget), in the order they
    first came; each setting's row is its median repeat (the slower of the middle two)."""
    repeats = {}
    for median, setting, row in rows_with_settings:
        repeats.setdefault(setting, []).append((median, row))
    fastest = {}
    for measured in repeats.values():
        measured.sort(key=lambda m: m[0])
        median, row = measured[len(measured) // 2]
        key = (row[0], row[1], row[2], row[3], row[6])
        if key not in fastest or median < fastest[key][0]:
            fastest[key] = (median, row)
    return [row for _, row in fastest.values()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", nargs="+")
    p.add_argument("--markdown", action="store_true", help="a Markdown table instead of aligned text")
    p.add_argument("--best", action="store_true", help="only the fastest cell per model, dtype, shape, backend, budget")
    a = p.parse_args()
    table = best(rows(a.db)) if a.best else [row for _, _, row in rows(a.db)]
    if a.markdown:
        print("| " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * len(COLUMNS))
        for r in table:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in table)) if table else len(h) for i, h in enumerate(COLUMNS)]
        print("  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths)))
        for r in table:
            print("  ".join(v.rjust(w) if i >= 9 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))))
    beaten = sum(1 for r in table if any(v.endswith("!") for v in r))
    if beaten:
        print(f"\n! {beaten} row(s) faster than a bound (latency ÷ bound below 1): a bound is a floor, so the bound "
              "or the measurement is wrong there")


if __name__ == "__main__":
    main()
