#!/usr/bin/env python3
"""The table of scripts/bench/recompute_vs_llmc.sh: each recompute setting's cost in tokens/s and its
saving in activation bytes, from sweetspot's training cells of one model and dtype in a results
database, beside llm.c's train_gpt2cu runs at its -r settings (their logs).

Usage: recompute_table.py DB [--model gpt2_1.5b] [--dtype bf16] [--llmc R=LOG ...]

Prints a Markdown table per batch: each setting's tokens/s and its ratio to `none`'s, its
activation bytes (the step's kept activations and scratch, activation_bytes) and what it saves
against `none`, and its NVML peak. Then llm.c's rows: its median tokens/s over its steps after the
first two, the ratio to its -r 0, the activations it says it allocates, and the device memory it
reports in use."""
import argparse
import re
import sqlite3
import statistics

LADDER = ["none", "gelu", "attention", "mlp", "block"]
GIB = 2**30


def sweetspot_cells(db, model, dtype):
    """{batch: {recompute: (status, tokens/s, activation bytes, peak bytes)}}: the latest cell of each."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT batch, recompute, status, tokens_per_s, activation_bytes, gpu_peak_bytes FROM cells "
        "WHERE model = ? AND dtype = ? AND mode = 'train' ORDER BY cell_id", (model, dtype)).fetchall()
    cells = {}
    for batch, recompute, status, rate, activations, peak in rows:
        cells.setdefault(int(batch), {})[recompute] = (status, rate, activations, peak)
    return cells


def llmc_run(path):
    """(median tokens/s of the steps after the first two, activation MiB, device MiB in use) from a
    train_gpt2cu log; None where the log lacks the line (an out-of-memory run has no steps)."""
    with open(path, errors="replace") as f:
        text = f.read()
    rates = [float(v) for v in re.findall(r"\|\s*([0-9.]+) tok/s", text)][2:]
    activations = re.search(r"allocating (\d+) MiB for activations", text)
    used = re.search(r"device memory usage: (\d+) MiB", text)
    return (statistics.median(rates) if rates else None, int(activations.group(1)) if activations else None,
            int(used.group(1)) if used else None)


def number(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--model", default="gpt2_1.5b")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--llmc", action="append", default=[], metavar="R=LOG",
                        help="llm.c's log of a run with -r R (repeatable)")
    args = parser.parse_args()

    for batch, settings in sorted(sweetspot_cells(args.db, args.model, args.dtype).items()):
        print(f"\n{args.model} {args.dtype}, batch {batch}:\n")
        print("| recompute | tokens/s | × none | activation bytes (GiB) | saved against none (GiB) | peak (GiB) |")
        print("|---|---|---|---|---|---|")
        none = settings.get("none")
        none_ok = none is not None and none[0] == "ok"
        for name in LADDER:
            if name not in settings:
                continue
            status, rate, activations, peak = settings[name]
            if status != "ok":
                print(f"| {name} | {status} | – | – | – | – |")
                continue
            ratio = f"{rate / none[1]:.3f}" if none_ok and none[1] else "–"
            saved = number((none[2] - activations) / GIB, 2) if none_ok and none[2] is not None else "–"
            print(f"| {name} | {number(rate)} | {ratio} | {number(activations / GIB, 2)} | {saved} | "
                  f"{number(peak / GIB if peak else None, 2)} |")

    if args.llmc:
        runs = {}
        for spec in args.llmc:
            setting, _, path = spec.partition("=")
            runs[setting] = llmc_run(path)
        print("\nllm.c (train_gpt2cu):\n")
        print("| -r | tokens/s | × -r 0 | activations (GiB) | device memory in use (GiB) |")
        print("|---|---|---|---|---|")
        base = runs.get("0", (None, None, None))[0]
        for setting, (rate, activations, used) in sorted(runs.items()):
            ratio = f"{rate / base:.3f}" if rate and base else "–"
            print(f"| {setting} | {number(rate) if rate else 'out of memory'} | {ratio} | "
                  f"{number(activations / 1024 if activations is not None else None, 2)} | "
                  f"{number(used / 1024 if used is not None else None, 2)} |")


if __name__ == "__main__":
    main()
