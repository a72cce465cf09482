#!/usr/bin/env python3
"""The table of scripts/bench/train_vs_pytorch.sh: sweetspot's training cells of one model, read
from a results database, beside pytorch_train.py's lines for the same dtypes and batches.

Usage: train_side_by_side.py DB PYTORCH_OUTPUT [--model gpt2_1.5b]

Prints a Markdown table: per dtype and batch, both sides' tokens/s and peak memory and their ratio;
then, per dtype, each side's best batch and the ratio of the two bests. sweetspot's peak is NVML's
(gpu_peak_bytes), PyTorch's its allocator's (max_memory_allocated)."""
import argparse
import sqlite3
import sys


def sweetspot_cells(db, model):
    """{(dtype, batch): (status, tokens/s or None, peak GiB or None)}: the latest cell of each, its
    dtype read "fp32 (split_tf32)" where its fp32 GEMMs were split_tf32's (files of schema 23 on)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    columns = {row[1] for row in con.execute("PRAGMA table_info(cells)")}
    split = "split_tf32" if "split_tf32" in columns else "0"
    rows = con.execute(
        f"SELECT dtype, {split}, batch, status, tokens_per_s, gpu_peak_bytes FROM cells WHERE model = ? "
        "AND mode = 'train' ORDER BY cell_id", (model,)).fetchall()
    cells = {}
    for dtype, split_tf32, batch, status, rate, peak in rows:
        cells[(dtype + (" (split_tf32)" if split_tf32 else ""), int(batch))] = (
            status, rate if status == "ok" else None, peak / 2**30 if status == "ok" and peak else None)
    return cells


def pytorch_lines(path, model):
    """{(dtype, batch): (tokens/s or None, peak GiB or None, note)} from pytorch_train.py's output."""
    runs = {}
    with open(path) as f:
        for line in f:
            words = line.split()
            if len(words) < 4 or words[0] != model:
                continue
            dtype, batch = words[1], int(words[2])
            if "out of memory" in line:
                runs[(dtype, batch)] = (None, None, "out of memory")
            elif len(words) == 7:
                runs[(dtype, batch)] = (float(words[5]), float(words[6]), "")
    return runs


def table(cells, runs):
    lines = ["| dtype | batch | sweetspot tokens/s (peak) | PyTorch tokens/s (peak) | sweetspot / PyTorch |",
             "|---|---|---|---|---|"]

    def side(rate, peak, note):
        if rate is None:
            return note or "–"
        return f"{rate:,.0f}" + (f" ({peak:.1f} GiB)" if peak is not None else "")

    best = {}
    # A split_tf32 cell's row carries PyTorch's run of its dtype at that batch.
    covered = {(label.split(" ")[0], batch) for label, batch in cells}
    for key in sorted(set(cells) | (set(runs) - covered)):
        dtype, batch = key
        status, ours, ours_peak = cells.get(key, ("not run", None, None))
        # PyTorch's run of the plain dtype: a split_tf32 cell is fp32 to it.
        theirs, theirs_peak, note = runs.get((dtype.split(" ")[0], batch), (None, None, "not run"))
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "–"
        lines.append(f"| {dtype} | {batch} | {side(ours, ours_peak, status)} | {side(theirs, theirs_peak, note)} | "
                     f"{ratio} |")
        for name, rate in (("sweetspot", ours), ("pytorch", theirs)):
            if rate and rate > best.get((dtype, name), (0, 0))[0]:
                best[(dtype, name)] = (rate, batch)
    lines.append("")
    for dtype in sorted({d for d, _ in best}):
        ours, theirs = best.get((dtype, "sweetspot")), best.get((dtype, "pytorch"))
        if ours and theirs:
            lines.append(f"At each side's best batch, {dtype}: sweetspot {ours[0]:,.0f} tokens/s (batch {ours[1]}) "
                         f"against PyTorch's {theirs[0]:,.0f} (batch {theirs[1]}): {ours[0] / theirs[0]:.2f} ×.")
    return "\n".join(lines)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db")
    parser.add_argument("pytorch_output")
    parser.add_argument("--model", default="gpt2_1.5b")
    args = parser.parse_args(argv)
    print(table(sweetspot_cells(args.db, args.model), pytorch_lines(args.pytorch_output, args.model)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
