#!/usr/bin/env python3
"""Issue 32's study tables from experiments/tempo.toml's database and, optionally, fit_check.py's.

Usage: tempo_study.py STUDY_DB [--fit FIT_DB] [--model gpt2_1.5b]

Prints, as Markdown:
1. each Tempo variant × recompute setting at its batch (the study's 16), dropout 0 and 0.1: tokens/s,
   its ratio to the variant without Tempo's flags at the same setting and dropout, the kept activation
   bytes (activation_bytes) and the peak device memory, measured and predicted;
2. with --fit, the largest batch of each (variant, setting) that ran (fit_check.py's cells: the
   estimator's answer run, and the two batches above it failing) and its tokens/s there;
3. the offloaded cells (optimizer = host): step and phases, bytes across the link each way, and each
   term of the bound (analysis/bound.py): the link; the host update at the rate the cell's own update
   arrays moved at (host_arrays_gbps, shown beside its state's alone, host_state_gbps) or, in cells from
   before them, its state's or the run's probe of its streams; the host memory, the update's and the link's
   bytes at the rate the host's memory moved those arrays and the link's copies at together
   (host_shared_gbps, shown; none before schema 31); the in-memory `device` step of the same workload where
   one exists. Then the bound, latency ÷ bound, latency ÷ the bound without the host memory term (the
   largest of the other three) and the dominant term; and, where the step clips (max_grad_norm above 0),
   the measured backward plus the host update's term, with latency ÷ that and that ÷ the bound: the update
   clips by the global gradient norm, so it cannot start before the backward's last gradient, and no overlap
   brings such a step below its own backward and the update (without clipping the backward starts the
   update, and the bound is the floor);
4. the offloaded cells' AdamW: its passes' time in the checked step's update, alone, and the median in the
   overlapped updates beside the steps, each with the rate the update's bytes moved at (host_adamw_alone_ms,
   host_adamw_ms; none before schema 32), and the three factors of the step over its host update term:
   AdamW alone over that term, beside the step over alone, the step over AdamW beside it;
5. the estimator's largest error on the peak device and host memory over every ok cell.
Every cell's latest row counts (a rerun replaces the earlier one)."""
import argparse
import pathlib
import sqlite3
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "analysis"))
from axes import Axes  # noqa: E402
import bound  # noqa: E402
from recompute_table import GIB, LADDER, number  # noqa: E402  (this folder's, beside this script)

# The flags Tempo's rewrites add to a variant, in the order the table lists them.
TEMPO_FLAGS = ("", "inplace_gelu", "inplace_ln", "inplace_ln+inplace_gelu")


def cells_of(path):
    """The latest row of each cell (by cell_key), with its run's columns, as dicts."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    run_columns = {r[1] for r in con.execute("PRAGMA table_info(runs)")}
    wanted = [c for c in ("h2d_gbps", "d2h_gbps", "host_memory_gbps", "host_update_gbps") if c in run_columns]
    select = "SELECT c.*" + "".join(f", r.{c}" for c in wanted) + " FROM cells c JOIN runs r USING (run_id) ORDER BY cell_id"
    latest = {}
    for row in con.execute(select):
        latest[row["cell_key"]] = dict(row)
    return list(latest.values()), Axes.of(con)


def tempo_flags(variant):
    """The variant's Tempo flags joined by '+' in TEMPO_FLAGS' spelling ("" for none)."""
    parts = variant.split("+")
    return "+".join(f for f in ("inplace_ln", "inplace_gelu") if f in parts)


def gib(v):
    return number(v / GIB if v is not None else None, 2)


def rewrites_table(cells, model):
    rows = {}
    for c in cells:
        if c["model"] != model or c["mode"] != "train" or c["optimizer"] == "host" or c["status"] != "ok":
            continue
        flags = tempo_flags(c["variant"])
        rows[(flags, c["recompute"], float(c["dropout"]), int(c["batch"]))] = c
    print(f"\n{model}, every setting at its batch (tokens/s; × the same setting without Tempo's flags):\n")
    print("| flags | recompute | batch | tokens/s, dropout 0 | × | tokens/s, dropout 0.1 | × | kept activations (GiB) | "
          "peak GiB (predicted) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for flags in TEMPO_FLAGS:
        for setting in LADDER:
            for batch in sorted({k[3] for k in rows if k[0] == flags and k[1] == setting}):
                line = [flags or "(none)", setting, str(batch)]
                for dropout in (0.0, 0.1):
                    c, ref = rows.get((flags, setting, dropout, batch)), rows.get(("", setting, dropout, batch))
                    rate = c["tokens_per_s"] if c else None
                    ratio = f"{rate / ref['tokens_per_s']:.3f}" if c and ref and ref["tokens_per_s"] else "–"
                    line += [number(rate), ratio]
                c = rows.get((flags, setting, 0.0, batch)) or rows.get((flags, setting, 0.1, batch))
                line += [gib(c["activation_bytes"]), f"{gib(c['gpu_peak_bytes'])} ({gib(c['predicted_peak_bytes'])})"]
                print("| " + " | ".join(line) + " |")


def fit_table(path, model):
    cells, _ = cells_of(path)
    largest = {}
    tried = {}
    for c in cells:
        if c["model"] != model or c["mode"] != "train":
            continue
        key = (tempo_flags(c["variant"]), c["recompute"])
        tried.setdefault(key, {})[int(c["batch"])] = c
        if c["status"] == "ok" and (key not in largest or c["batch"] > largest[key]["batch"]):
            largest[key] = c
    print(f"\n{model}, the largest batch that runs (fit_check.py: the estimator's answer, the next two failing):\n")
    print("| flags | " + " | ".join(LADDER) + " |")
    print("|---|" + "---|" * len(LADDER))
    for flags in TEMPO_FLAGS:
        line = [flags or "(none)"]
        for setting in LADDER:
            c = largest.get((flags, setting))
            if c is None:
                line.append("–")
                continue
            above = [tried[(flags, setting)].get(int(c["batch"]) + k) for k in (1, 2)]
            failed = all(a is not None and a["status"] != "ok" for a in above)
            line.append(f"{c['batch']}{'' if failed else ' (next not run)'}: {number(c['tokens_per_s'])}")
        print("| " + " | ".join(line) + " |")
    base = {s: largest[("", s)]["batch"] for s in LADDER if ("", s) in largest}
    best_base = max((largest[k] for k in largest if k[0] == ""), key=lambda c: c["tokens_per_s"], default=None)
    print("\nLargest batch against the same setting without flags, and the fastest cell of each:\n")
    print("| flags | " + " | ".join(LADDER) + " | fastest (setting, batch, tokens/s) | × the fastest without flags |")
    print("|---|" + "---|" * (len(LADDER) + 2))
    for flags in TEMPO_FLAGS:
        line = [flags or "(none)"]
        for setting in LADDER:
            c = largest.get((flags, setting))
            line.append(f"{c['batch'] / base[setting]:.2f}" if c and setting in base else "–")
        best = max((largest[k] for k in largest if k[0] == flags), key=lambda c: c["tokens_per_s"], default=None)
        line.append(f"{best['recompute']}, {best['batch']}, {number(best['tokens_per_s'])}" if best else "–")
        line.append(f"{best['tokens_per_s'] / best_base['tokens_per_s']:.3f}" if best and best_base else "–")
        print("| " + " | ".join(line) + " |")


def ratio(numerator, denominator):
    return f"{numerator / denominator:.2f}" if numerator and denominator else "–"


def hosted_cells(cells):
    """The ok training cells whose AdamW ran on the host."""
    return [c for c in cells if c["mode"] == "train" and c["optimizer"] == "host" and c["status"] == "ok"]


def offload_table(cells, axes):
    device = bound.device_latencies(cells, axes.workload)
    hosted = hosted_cells(cells)
    if not hosted:
        return
    print("\nTraining with AdamW on the host (step ms; bytes across the link each way; the bound's terms, ms):\n")
    print("| model | backend | budget | batch | max_grad_norm | step | forward | backward | update | GB up | GB down | link | "
          "state GB/s | arrays GB/s | host update | shared GB/s | host memory | in-memory step | bound | "
          "step ÷ bound | step ÷ bound without host memory | dominant term | backward + host update | step ÷ that | "
          "that ÷ bound |")
    print("|" + "---|" * 25)
    def clip_of(c):  # cells before the axis (schema 28) clipped to 1
        return c.get("max_grad_norm", 1)

    for c in sorted(hosted, key=lambda c: (c["model"], c["backend"], c["budget"], c["batch"], -clip_of(c))):
        terms = {"link": bound.link_ms(c), "host update": bound.host_update_ms(c),
                 "host memory": bound.host_memory_ms(c),
                 "in-memory step": bound.present(device.get(bound.workload(c, axes.workload)))}
        known = {k: v for k, v in terms.items() if v is not None}
        top = max(known, key=known.get) if known else None
        limit = known[top] if top else None
        others = [v for k, v in known.items() if k != "host memory"]
        clips = clip_of(c) > 0
        serial = c["backward_ms"] + terms["host update"] if clips and terms["host update"] and c["backward_ms"] else None
        step = c["latency_median_ms"]
        print(f"| {c['model']} | {c['backend']} | {c['budget']} | {c['batch']} | {clip_of(c):g} | "
              f"{number(step)} | "
              f"{number(c['forward_ms'])} | {number(c['backward_ms'])} | {number(c['optimizer_ms'])} | "
              f"{number(c['link_to_device_bytes'] / 1e9, 1)} | {number(c['link_to_host_bytes'] / 1e9, 1)} | "
              f"{number(terms['link'])} | {number(c.get('host_state_gbps'), 1)} | "
              f"{number(c.get('host_arrays_gbps'), 1)} | {number(terms['host update'])} | "
              f"{number(c.get('host_shared_gbps'), 1)} | {number(terms['host memory'])} | "
              f"{number(terms['in-memory step'])} | "
              f"{number(limit)} | {ratio(step, limit)} | {ratio(step, max(others, default=None))} | {top or '–'} | "
              f"{number(serial)} | {ratio(step, serial)} | {ratio(serial, limit)} |")
    # The run's probes, behind the host update's term where a cell has no rate of its own (before
    # schema 30): they drift with the host's other tenants.
    runs = sorted({(c["run_id"], c.get("host_update_gbps"), c.get("host_memory_gbps")) for c in hosted},
                  key=lambda r: r[0])
    for run_id, streams, triad in runs:
        print(f"\nRun {run_id}: the host update's streams {number(streams, 1)} GB/s moved, the STREAM triad "
              f"{number(triad, 1)} GB/s counted.")


def adamw_table(cells):
    """Where the offloaded cells' host update spent its time: AdamW's passes alone (the checked step's
    update) and beside the steps (the overlapped updates), each as ms and as the rate its bytes moved
    at, beside the cell's own rates (schema 32 on). Then the three factors whose product is the step
    over the host update term at the arrays' rate: AdamW alone over that term (its loop against its
    memory), AdamW beside the step over alone (what the step's other work costs it), and the step over
    AdamW beside it (the time the step runs without AdamW)."""
    timed = [c for c in hosted_cells(cells) if c.get("host_adamw_ms")]
    if not timed:
        return
    print("\nAdamW on the host, alone and beside the step (ms, and GB/s its bytes moved at):\n")
    print("| model | backend | budget | batch | max_grad_norm | step | state GB/s | arrays GB/s | shared GB/s | "
          "AdamW alone | alone GB/s | AdamW in the step | in the step GB/s | step − AdamW | "
          "alone ÷ arrays' time | in the step ÷ alone | step ÷ AdamW in the step |")
    print("|" + "---|" * 17)
    for c in sorted(timed, key=lambda c: (c["model"], c["backend"], c["budget"], c["batch"], -c["max_grad_norm"])):
        update, arrays = bound.host_update_bytes(c), c.get("host_arrays_gbps")

        def gbps(ms):
            return number(update / (ms * 1e6), 1) if update and ms else "–"

        step, alone, beside = c["latency_median_ms"], c.get("host_adamw_alone_ms"), c["host_adamw_ms"]
        arrays_ms = update / (arrays * 1e6) if update and arrays else None
        print(f"| {c['model']} | {c['backend']} | {c['budget']} | {c['batch']} | {c['max_grad_norm']:g} | "
              f"{number(step)} | {number(c.get('host_state_gbps'), 1)} | "
              f"{number(arrays, 1)} | {number(c.get('host_shared_gbps'), 1)} | "
              f"{number(alone)} | {gbps(alone)} | {number(beside)} | {gbps(beside)} | {number(step - beside)} | "
              f"{ratio(alone, arrays_ms)} | {ratio(beside, alone)} | {ratio(step, beside)} |")


def estimator_errors(cells):
    device, host = [], []
    for c in cells:
        if c["status"] != "ok":
            continue
        if c["predicted_peak_bytes"] and c["gpu_peak_bytes"]:
            device.append(abs(c["predicted_peak_bytes"] - c["gpu_peak_bytes"]) / c["gpu_peak_bytes"])
        if c.get("predicted_host_peak_bytes") and c.get("peak_host_rss_bytes"):
            host.append(abs(c["predicted_host_peak_bytes"] - c["peak_host_rss_bytes"]) / c["peak_host_rss_bytes"])
    for name, errors in (("peak device memory", device), ("peak host memory", host)):
        if errors:
            print(f"\nEstimator, {name}: {len(errors)} ok cells with a prediction, largest error {max(errors):.2%}, "
                  f"median {sorted(errors)[len(errors) // 2]:.2%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db")
    parser.add_argument("--fit", help="fit_check.py's database of the same templates")
    parser.add_argument("--model", default="gpt2_1.5b")
    args = parser.parse_args()
    cells, axes = cells_of(args.db)
    rewrites_table(cells, args.model)
    if args.fit:
        fit_table(args.fit, args.model)
    offload_table(cells, axes)
    adamw_table(cells)
    estimator_errors(cells)


if __name__ == "__main__":
    main()
