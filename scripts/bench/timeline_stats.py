#!/usr/bin/env python3
"""Where the time of a traced iteration goes, per cell: the evidence behind a cell's ratio to its bound.

For every ok cell with a traced iteration in the sweetspot databases given, prints the split that
analysis/time_split.py computes (the report shows the same table): compute busy and idle time
(idle while weights were in flight, and with the link idle), host-to-device traffic, link busy and
idle time, the rate while busy, and the head and tail of the link's idle time.

Usage: timeline_stats.py DB [DB ...] [--cell ID] [--markdown]
"""
import argparse
import pathlib
import sqlite3
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "analysis"))
from time_split import COLUMNS, fmt, time_split  # noqa: E402

PARAMETERS = [("cell", "cell_id"), ("model", "model"), ("dtype", "dtype"), ("backend", "backend"),
              ("prefetch", "prefetch"), ("streams", "streams"), ("budget", "budget"), ("evict", "evict")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="+")
    parser.add_argument("--cell", type=int, help="only this cell (with one database)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    headers = [h for h, _ in PARAMETERS] + ["timed ms"] + [h for h, _, _ in COLUMNS]
    table = []
    for path in args.databases:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        con.row_factory = sqlite3.Row
        query = "SELECT * FROM cells WHERE status = 'ok' AND trace_iterations > 0"
        params = ()
        if args.cell is not None:
            query += " AND cell_id = ?"
            params = (args.cell,)
        for cell in con.execute(query + " ORDER BY cell_id", params).fetchall():
            split = time_split(con, cell["cell_id"])
            if split is not None:
                table.append([str(cell[k]) for _, k in PARAMETERS] + [fmt(cell["latency_median_ms"])]
                             + [fmt(split[k], d) for _, k, d in COLUMNS])
    if not table:
        print("no traced cells found", file=sys.stderr)
        return 1
    if args.markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for line in table:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) for line in table)) for i, h in enumerate(headers)]
        print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
        for line in table:
            print("  ".join(v.rjust(w) for v, w in zip(line, widths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
