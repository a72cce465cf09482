#!/usr/bin/env python3
"""The packing study's tables of docs/benchmarks.md from results databases (experiments/packing.toml).

1. Padded against packed: per model, mode (forwards and training steps), dtype, variant, batch and
   lengths draw, the real tokens and the padding share, each packing's median ms, tokens/s (real
   tokens) and peak GPU memory (NVML), packed's speed-up and its share of padded's peak. A padded
   cell that did not run (a predicted OOM) reads as its status, with its predicted peak.
2. Varlen overhead: each packed cell beside the rectangular cell of the same model, dtype, variant and
   batch holding the same real tokens within 1 %, by achieved TFLOP/s (the real tokens' model flops,
   each sequence's attention within itself), so the few tokens they differ by do not count.
3. With --pytorch FILE (the output of pytorch_packing.py --lengths-from DB on the same machine):
   PyTorch's padded and block-diagonal packed forwards beside the sweetspot cells whose lengths
   they ran (its cells column; without one, the cells of the same model, dtype and real tokens).
Usage: packing_table.py DB [DB ...] [--pytorch FILE]
"""
import argparse
import os
import sqlite3
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from variants_table import markdown  # noqa: E402

GIB = 2**30
QUERY = """
SELECT cell_id, model, mode, dtype, variant, batch, seq, lengths, packing, status, real_tokens, padding_share,
       latency_median_ms, tokens_per_s, achieved_tflops, gpu_peak_bytes, predicted_peak_bytes
FROM cells WHERE backend != 'host' AND (status != 'ok' OR real_tokens IS NOT NULL)
"""
COLUMNS = ["cell_id", "model", "mode", "dtype", "variant", "batch", "seq", "lengths", "packing", "status", "real_tokens",
           "padding_share", "ms", "tokens_per_s", "tflops", "peak", "predicted_peak"]


def read_cells(dbs):
    """(every ok GPU cell as a dict, repeats of one cell keeping the median of their medians; the GPU
    cells that did not run ok, the last of each)"""
    repeats, not_ok = defaultdict(list), {}
    for db in dbs:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        for row in con.execute(QUERY):
            cell = dict(zip(COLUMNS, row))
            key = tuple(cell[k] for k in COLUMNS[1:9])
            if cell["status"] == "ok":
                repeats[key].append(cell)
            else:
                not_ok[key] = cell
    cells = []
    for group in repeats.values():
        cell = dict(group[0])
        for k in ("ms", "tokens_per_s", "tflops"):
            cell[k] = statistics.median(c[k] for c in group)
        cells.append(cell)
    return cells, [c for key, c in not_ok.items() if key not in repeats]


def gib(b):
    return f"{b / GIB:.2f}" if b else "-"


def packing_rows(cells, not_ok):
    pairs = defaultdict(dict)
    for c in cells + not_ok:
        if c["lengths"] != "fixed":
            pairs[(c["model"], c["mode"], c["dtype"], c["variant"], c["batch"], c["lengths"])][c["packing"]] = c
    yield ["model", "mode", "dtype", "variant", "batch", "lengths", "real tokens", "padding", "padded ms", "packed ms",
           "packed speed-up", "padded tokens/s", "packed tokens/s", "padded peak GiB", "packed peak GiB",
           "packed ÷ padded peak"]
    for key in sorted(pairs):
        padded, packed = pairs[key].get("padded"), pairs[key].get("packed")
        if not padded or not packed or packed["status"] != "ok":
            continue
        if padded["status"] != "ok":
            predicted = padded["predicted_peak"]
            yield [*map(str, key), str(packed["real_tokens"]), "-", padded["status"], f"{packed['ms']:.1f}", "-", "-",
                   f"{packed['tokens_per_s']:.0f}", f"predicted {gib(predicted)}" if predicted else "-",
                   gib(packed["peak"]), "-"]
            continue
        share = f"{100 * packed['peak'] / padded['peak']:.1f} %" if padded["peak"] and packed["peak"] else "-"
        yield [*map(str, key), str(packed["real_tokens"]), f"{100 * padded['padding_share']:.1f} %",
               f"{padded['ms']:.1f}", f"{packed['ms']:.1f}", f"{padded['ms'] / packed['ms']:.2f}",
               f"{padded['tokens_per_s']:.0f}", f"{packed['tokens_per_s']:.0f}", gib(padded["peak"]),
               gib(packed["peak"]), share]


def overhead_rows(cells):
    fixed = {(c["model"], c["mode"], c["dtype"], c["variant"], c["batch"]): c for c in cells if c["lengths"] == "fixed"}
    yield ["model", "dtype", "variant", "batch", "packed lengths", "packed tokens", "rectangular", "packed TFLOP/s",
           "rectangular TFLOP/s", "varlen overhead"]
    for c in sorted(cells, key=lambda c: (c["model"], c["batch"], c["lengths"])):
        if c["packing"] != "packed" or c["lengths"] == "fixed":
            continue
        r = fixed.get((c["model"], c["mode"], c["dtype"], c["variant"], c["batch"]))
        if not r or abs(c["real_tokens"] / r["real_tokens"] - 1) > 0.01:
            continue
        yield [c["model"], c["dtype"], c["variant"], str(c["batch"]), c["lengths"], str(c["real_tokens"]),
               f"{r['batch']} × {r['seq']}", f"{c['tflops']:.1f}", f"{r['tflops']:.1f}",
               f"{100 * (r['tflops'] / c['tflops'] - 1):+.1f} %"]


def pytorch_runs(path):
    """[(row, cell ids)] from pytorch_packing.py's output, read by its header's names; a row is a dict
    of its columns, the cell ids those it names (none in an output without a cells column)."""
    runs = []
    header = None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "model":
                header = parts
                continue
            if header and len(parts) == len(header):
                row = dict(zip(header, parts))
                ids = {int(i) for i in row.get("cells", "-").split(",") if i.isdigit()}
                runs.append((row, ids))
    return runs


def pytorch_rows(cells, runs):
    """Above 1 in the last column: sweetspot's packed forward is faster than PyTorch's correct one."""
    yield ["model", "batch", "lengths", "real tokens", "PyTorch padded ms", "PyTorch packed ms",
           "PyTorch padded peak GiB", "PyTorch packed peak GiB", "sweetspot padded ms", "sweetspot packed ms",
           "sweetspot padded peak GiB", "sweetspot packed peak GiB", "PyTorch packed ms ÷ sweetspot packed ms"]
    # {batch: {mode: (ms, GiB)}} and {batch: {packing: cell}}, a batch being the cells PyTorch names,
    # or its model, dtype and real tokens.
    theirs, mine = defaultdict(dict), defaultdict(dict)
    ragged = [c for c in cells if c["lengths"] != "fixed"]
    for row, ids in runs:
        batch = (row["model"], row.get("dtype", ""), int(row["tokens"]), frozenset(ids))
        theirs[batch][row["mode"]] = (float(row["median_ms"]), float(row["peak_gib"]))
        for c in ragged:
            same = c["cell_id"] in ids if ids else (c["model"], c["real_tokens"]) == (row["model"], int(row["tokens"]))
            if same and row.get("dtype", c["dtype"]) == c["dtype"]:
                mine[batch][c["packing"]] = c
    for batch in sorted(theirs, key=lambda b: b[:3]):
        ours = mine.get(batch)
        if not ours or "packed" not in ours:
            continue
        them = theirs[batch]
        any_cell = next(iter(ours.values()))
        ms = lambda k: f"{them[k][0]:.1f}" if k in them else "-"  # noqa: E731
        peak = lambda k: f"{them[k][1]:.2f}" if k in them else "-"  # noqa: E731
        our_ms = lambda k: f"{ours[k]['ms']:.1f}" if k in ours else "-"  # noqa: E731
        our_peak = lambda k: gib(ours[k]["peak"]) if k in ours else "-"  # noqa: E731
        ratio = f"{them['packed'][0] / ours['packed']['ms']:.2f}" if "packed" in them else "-"
        yield [batch[0], str(any_cell["batch"]), any_cell["lengths"], str(batch[2]), ms("padded"), ms("packed"),
               peak("padded"), peak("packed"), our_ms("padded"), our_ms("packed"), our_peak("padded"),
               our_peak("packed"), ratio]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("db", nargs="+")
    p.add_argument("--pytorch", help="output of scripts/bench/pytorch_packing.py on the same machine and lengths")
    a = p.parse_args()
    cells, not_ok = read_cells(a.db)
    print(markdown(packing_rows(cells, not_ok)))
    print()
    print(markdown(overhead_rows(cells)))
    if a.pytorch:
        print()
        print(markdown(pytorch_rows(cells, pytorch_runs(a.pytorch))))


if __name__ == "__main__":
    main()
