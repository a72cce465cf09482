#!/usr/bin/env python3
"""Where the time of a traced iteration goes, per cell: the evidence behind a cell's ratio to its bound.

For every ok cell with a traced iteration in the sweetspot databases given, prints the split that
analysis/time_split.py computes (the report shows the same table): compute busy and idle time
(idle while weights were in flight, and with the link idle), host-to-device traffic, link busy and
idle time, the rate while busy, and the head and tail of the link's idle time.
With --transfers, one cell's transfers instead: each host-to-device burst with the host's NVTX
phase open when it began (analysis/time_split.py's transfers()).

Usage: timeline_stats.py DB [DB ...] [--cell ID] [--markdown]
       timeline_stats.py DB --cell ID --transfers [--markdown]
"""
import argparse
import pathlib
import sqlite3
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "analysis"))
from time_split import COLUMNS, TRANSFER_COLUMNS, fmt, time_split, transfers  # noqa: E402

PARAMETERS = [("cell", "cell_id"), ("model", "model"), ("dtype", "dtype"), ("backend", "backend"),
              ("prefetch", "prefetch"), ("streams", "streams"), ("budget", "budget"), ("evict", "evict")]


def print_table(headers, table, markdown):
    if markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for line in table:
            print("| " + " | ".join(line) + " |")
    else:
        widths = [max(len(h), *(len(line[i]) for line in table)) for i, h in enumerate(headers)]
        print("  ".join(h.rjust(w) for h, w in zip(headers, widths)))
        for line in table:
            print("  ".join(v.rjust(w) for v, w in zip(line, widths)))


def transfer_table(path, cell_id):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    found = transfers(con, cell_id)
    if found is None:
        print(f"cell {cell_id} has no traced iteration in {path}", file=sys.stderr)
        return None
    headers = [h for h, _, _ in TRANSFER_COLUMNS] + ["host phase (layer)"]
    return headers, [[fmt(t[k], d) for _, k, d in TRANSFER_COLUMNS] + [t["host_phase"]] for t in found]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="+")
    parser.add_argument("--cell", type=int, help="only this cell (with one database)")
    parser.add_argument("--transfers", action="store_true",
                        help="list the cell's host-to-device transfers with the host phase of each (needs --cell)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    if args.transfers:
        if args.cell is None or len(args.databases) != 1:
            parser.error("--transfers needs one database and --cell")
        found = transfer_table(args.databases[0], args.cell)
        if found is None:
            return 1
        if not found[1]:
            print(f"cell {args.cell}'s traced iteration has no host-to-device transfer", file=sys.stderr)
            return 1
        print_table(*found, args.markdown)
        return 0
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
    print_table(headers, table, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
