#!/usr/bin/env python3
"""The fused-variant tables of docs/benchmarks.md from results databases.

Per workload (model, backend, dtype, batch × seq, dropout, budget) and variant: the median over
repeats of the cells' median latencies, the repeats themselves, the ratio to baseline on the same
workload, and launches per forward. With --pytorch FILE (the output of pytorch_eager.py), a second
table sets the `device` cells' baseline and fastest variant beside PyTorch eager and SDPA on the same shapes.
Usage: variants_table.py DB [DB ...] [--pytorch FILE]
"""
import argparse
import sqlite3
import statistics
from collections import defaultdict

PRESETS = ["baseline", "dropout_ln", "attn_ln", "ffn_ln", "attn_proj", "all"]
QUERY = """
SELECT model, backend, dtype, batch, seq, dropout, budget, variant, latency_median_ms, launches_per_forward
FROM cells WHERE status = 'ok' AND backend != 'host'
"""


def budget_text(budget):
    """A budget in bytes (how the database stores an absolute one) in GiB; a share as it is."""
    text = str(budget)
    return f"{int(text) / 2**30:g} GiB" if text.isdigit() else text


def workloads(dbs):
    """{workload: {variant: ([medians of the repeats], launches)}}"""
    table = defaultdict(lambda: defaultdict(lambda: ([], None)))
    for db in dbs:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        for model, backend, dtype, batch, seq, dropout, budget, variant, median, launches in con.execute(QUERY):
            key = (model, backend, dtype, f"{batch} × {seq}", dropout, budget_text(budget))
            medians, _ = table[key][variant]
            medians.append(median)
            table[key][variant] = (medians, launches)
    return table


def variant_order(v):
    return (PRESETS.index(v), "") if v in PRESETS else (len(PRESETS), v)


def variants_rows(table):
    yield ["model", "backend", "dtype", "batch × seq", "dropout", "budget", "variant", "ms (repeats)", "÷ baseline",
           "launches"]
    for key in sorted(table):
        by_variant = table[key]
        base = statistics.median(by_variant["baseline"][0]) if "baseline" in by_variant else None
        for variant in sorted(by_variant, key=variant_order):
            medians, launches = by_variant[variant]
            ms = statistics.median(medians)
            repeats = f" ({', '.join(f'{m:.1f}' for m in medians)})" if len(medians) > 1 else ""
            ratio = f"{base / ms:.3f}" if base else "-"
            yield [*map(str, key), variant, f"{ms:.1f}{repeats}", ratio, "-" if launches is None else str(launches)]


def pytorch_times(path):
    """{(model, dtype, "batch × seq"): {attn: median_ms}} from pytorch_eager.py's output."""
    times = defaultdict(dict)
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 8 or parts[0] == "model":
                continue
            model, dtype, batch, seq, attn, median = parts[:6]
            times[(model, dtype, f"{batch} × {seq}")][attn] = float(median)
    return times


def pytorch_rows(table, times):
    """sweetspot's baseline and its fastest variant on each shape PyTorch ran; the ratio is SDPA's
    time over the fastest's (above 1: sweetspot is faster)."""
    yield ["model", "dtype", "batch × seq", "PyTorch eager", "PyTorch SDPA", "sweetspot baseline", "sweetspot fastest",
           "its variant", "SDPA ms ÷ fastest ms"]
    for (model, backend, dtype, shape, dropout, _), by_variant in sorted(table.items()):
        theirs = times.get((model, dtype, shape))
        if backend != "device" or dropout != 0 or not theirs:
            continue
        ours = {v: statistics.median(medians) for v, (medians, _) in by_variant.items()}
        fastest = min(ours, key=ours.get)
        cell = lambda d, k: f"{d[k]:.1f}" if k in d else "-"  # noqa: E731
        speed = f"{theirs['sdpa'] / ours[fastest]:.2f}" if "sdpa" in theirs else "-"
        yield [model, dtype, shape, cell(theirs, "eager"), cell(theirs, "sdpa"), cell(ours, "baseline"),
               cell(ours, fastest), fastest, speed]


def markdown(rows):
    rows = list(rows)
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", nargs="+")
    p.add_argument("--pytorch", help="output of scripts/bench/pytorch_eager.py on the same machine")
    a = p.parse_args()
    table = workloads(a.db)
    print(markdown(variants_rows(table)))
    if a.pytorch:
        print()
        print(markdown(pytorch_rows(table, pytorch_times(a.pytorch))))


if __name__ == "__main__":
    main()
