#!/usr/bin/env python3
"""The harness's overhead per cell (issue 16's target) from results databases, the table of docs/benchmarks.md.

A cell's overhead is its wall time less what it spent measuring: wall_s − (warm-ups + timed
iterations) × its median latency. Per model, dtype and backend, over the ok GPU cells: the cells,
the overhead's smallest, median and largest, the target (1.5 s for GPT-2 1.5B; 1 s + the weights
÷ 20 GB/s for the larger models; none for others) and how many cells meet it; then the median
seconds of each phase (cell_phases) per backend, the phases in the order the cells ran them.
Usage: overhead_table.py DB [DB ...]
"""
import argparse
import sqlite3
import statistics
from collections import defaultdict

GB = 1e9
# Models measured against the target, and the target's fixed part (s); the larger models' target
# adds the time their weights take at 20 GB/s.
TARGETS = {"gpt2_1.5b": (1.5, False), "gpt3_6.7b": (1.0, True), "gpt3_13b": (1.0, True), "gpt3_13b_seed": (1.0, True)}

CELLS = """
SELECT c.cell_id, c.model, c.dtype, c.backend, c.wall_s, c.warmups, c.latency_median_ms, c.weight_bytes,
       (SELECT count(*) FROM iterations i WHERE i.cell_id = c.cell_id AND i.phase = 'timed')
FROM cells c WHERE c.status = 'ok' AND c.backend != 'host' AND c.wall_s IS NOT NULL AND c.latency_median_ms IS NOT NULL
"""
PHASES = "SELECT cell_id, position, phase, seconds FROM cell_phases"


def target_s(model, weight_bytes):
    if model not in TARGETS:
        return None
    fixed, per_weight = TARGETS[model]
    return fixed + (weight_bytes / (20 * GB) if per_weight else 0.0)


def read(dbs):
    cells, phases = [], []
    for n, db in enumerate(dbs):
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        for cell_id, model, dtype, backend, wall, warmups, median_ms, weight_bytes, timed in con.execute(CELLS):
            overhead = wall - (warmups + timed) * median_ms / 1000.0
            cells.append(dict(key=(n, cell_id), model=model, dtype=dtype, backend=backend, overhead=overhead,
                              target=target_s(model, weight_bytes)))
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "cell_phases" in tables:
            phases += [((n, cell_id), position, phase, seconds) for cell_id, position, phase, seconds in con.execute(PHASES)]
        con.close()
    return cells, phases


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", nargs="+")
    a = p.parse_args()
    cells, phases = read(a.db)
    if not cells:
        print("no ok GPU cell with its wall time and latency")
        return
    groups = defaultdict(list)
    for c in cells:
        groups[(c["model"], c["dtype"], c["backend"])].append(c)
    print("| model | dtype | backend | cells | overhead s: min | median | max | target s | cells within it |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (model, dtype, backend), group in sorted(groups.items()):
        o = [c["overhead"] for c in group]
        targets = [c["target"] for c in group]
        if targets[0] is None:
            target, within = "–", "–"
        else:
            target = f"{min(targets):.2f}" if min(targets) == max(targets) else f"{min(targets):.2f}–{max(targets):.2f}"
            within = f"{sum(1 for c in group if c['overhead'] <= c['target'])} of {len(group)}"
        print(f"| {model} | {dtype} | {backend} | {len(group)} | {min(o):.2f} | {statistics.median(o):.2f} | "
              f"{max(o):.2f} | {target} | {within} |")

    backend_of = {c["key"]: c["backend"] for c in cells}
    order, seconds = {}, defaultdict(lambda: defaultdict(list))
    for key, position, phase, s in phases:
        if key not in backend_of:
            continue
        order[phase] = min(order.get(phase, position), position)
        seconds[backend_of[key]][phase].append(s)
    if not seconds:
        return
    backends = sorted(seconds)
    names = sorted(order, key=lambda ph: (order[ph], ph))
    print()
    print("| phase | " + " | ".join(f"{b}: median s" for b in backends) + " |")
    print("|---|" + "---|" * len(backends))
    for phase in names:
        row = [f"{statistics.median(seconds[b][phase]):.2f}" if seconds[b][phase] else "–" for b in backends]
        print(f"| {phase} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
