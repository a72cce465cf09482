#!/usr/bin/env python3
"""Two results databases of the same matrix, cell for cell (matched by cell key): status, median
latency before and after with their ratio, the numerical check's relative error, and whether the
placement (resident and streamed bytes) is the same. Used to show that a refactoring changed no
result: `compare_cells.py BEFORE.db AFTER.db`."""
import sqlite3
import statistics
import sys

COLUMNS = ("model", "backend", "dtype", "prefetch", "budget", "activations", "evict", "status", "latency_median_ms",
           "check_rel_err", "resident_bytes", "streamed_bytes")


def load(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(f"SELECT cell_key, {', '.join(COLUMNS)} FROM cells").fetchall()
    return {r[0]: dict(zip(COLUMNS, r[1:])) for r in rows}


def text(value, fmt):
    return "-" if value is None else fmt % value


def main(before_path, after_path):
    before, after = load(before_path), load(after_path)
    print(f"cells: {len(before)} before, {len(after)} after; "
          f"{len(set(before) & set(after))} keys in both, {len(set(before) ^ set(after))} in one only")
    print(f"{'model':10} {'backend':13} {'dtype':5} {'pf':3} {'budget':6} {'act':7} {'evict':11} {'status':14} "
          f"{'ms before':>9} {'ms after':>9} {'ratio':>6} {'err before':>10} {'err after':>10} placement")
    ratios = []
    same = {"status": 0, "err": 0, "placement": 0}
    keys = sorted(set(before) & set(after), key=lambda k: [str(before[k][c]) for c in COLUMNS[:7]])
    for k in keys:
        b, a = before[k], after[k]
        ratio = a["latency_median_ms"] / b["latency_median_ms"] if b["latency_median_ms"] and a["latency_median_ms"] else None
        if ratio:
            ratios.append(ratio)
        placement = (b["resident_bytes"], b["streamed_bytes"]) == (a["resident_bytes"], a["streamed_bytes"])
        same["status"] += b["status"] == a["status"]
        same["err"] += b["check_rel_err"] == a["check_rel_err"]
        same["placement"] += placement
        status = b["status"] if b["status"] == a["status"] else f"{b['status']}->{a['status']}"
        print(f"{b['model']:10} {b['backend']:13} {b['dtype']:5} {b['prefetch']:3} {b['budget']:6} {b['activations']:7} "
              f"{b['evict']:11} {status:14} {text(b['latency_median_ms'], '%9.3f')} {text(a['latency_median_ms'], '%9.3f')} "
              f"{text(ratio, '%6.3f')} {text(b['check_rel_err'], '%10.2e')} {text(a['check_rel_err'], '%10.2e')} "
              f"{'same' if placement else 'DIFFERENT'}")
    print(f"same status {same['status']}/{len(keys)}, identical relative error {same['err']}/{len(keys)}, "
          f"same placement {same['placement']}/{len(keys)}")
    if ratios:
        print(f"median latency after/before: median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f} over {len(ratios)} measured cells")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
