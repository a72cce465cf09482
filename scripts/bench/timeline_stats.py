#!/usr/bin/env python3
"""Where the time of a traced iteration goes, per cell: the evidence behind a cell's ratio to its bound.

For every cell with a traced iteration in a sweetspot database, reads the GPU activity between the
iteration's NVTX range and prints: the iteration as traced, the compute stream's busy time and its
idle time (split into idle while a weight copy or migration was running, i.e. waiting for weights,
and idle with the link idle too), the host-to-device traffic (explicit copies, or UM migrations
for the UVM backends), how long the link was busy, the rate it moved while busy, and how long it
sat idle inside the iteration (head: before the first copy; tail: after the last one).

Usage: timeline_stats.py DB [DB ...] [--cell ID] [--markdown]
"""
import argparse
import sqlite3
import statistics
import sys

HTOD_KINDS = (1, 11)  # CUPTI memcpy kind HtoD, and Unified Memory HtoD migrations


def union(intervals):
    """Merged, sorted, non-overlapping intervals."""
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersect(a, b):
    """Total length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def traced_window(db, cell_id):
    row = db.execute(
        "SELECT n.start, n.\"end\" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.cell_id = ? AND COALESCE(n.text, s.value) = 'traced iteration 0'",
        (cell_id,),
    ).fetchone()
    return row


def cell_stats(db, cell):
    window = traced_window(db, cell["cell_id"])
    if window is None:
        return None
    host_start, host_end = window
    # GPU work enqueued inside the range may finish after the host leaves it; the next iteration's
    # range starts later, so everything that starts before the host range ends belongs to it.
    kernels = db.execute(
        "SELECT start, \"end\", streamId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE cell_id = ? AND start >= ? AND start < ?",
        (cell["cell_id"], host_start, host_end),
    ).fetchall()
    copies = db.execute(
        "SELECT start, \"end\", bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE cell_id = ? AND copyKind IN (?, ?) "
        "AND start >= ? AND start < ?",
        (cell["cell_id"], *HTOD_KINDS, host_start, host_end),
    ).fetchall()
    if not kernels:
        return None
    streams = {}
    for _, _, stream in kernels:
        streams[stream] = streams.get(stream, 0) + 1
    compute_stream = max(streams, key=streams.get)
    compute = union([(s, e) for s, e, st in kernels if st == compute_stream])
    gpu_start = min([compute[0][0]] + [s for s, _, _ in copies])
    gpu_end = max([compute[-1][1]] + [e for _, e, _ in copies])
    span = gpu_end - gpu_start
    idle = union([(a[1], b[0]) for a, b in zip(compute, compute[1:])] + [(gpu_start, compute[0][0])])
    link = union([(s, e) for s, e, _ in copies])
    link_busy = length(link)
    moved = sum(b for _, _, b in copies)
    per_copy = [b / (e - s) for s, e, b in copies if e > s and b >= (1 << 20)]
    return {
        "cell": cell,
        "traced_ms": span / 1e6,
        "compute_busy_ms": length(compute) / 1e6,
        "idle_waiting_ms": intersect(idle, link) / 1e6,
        "idle_other_ms": (length(idle) - intersect(idle, link)) / 1e6,
        "copies": len(copies),
        "htod_gb": moved / 1e9,
        "link_busy_ms": link_busy / 1e6,
        "link_gbps": moved / link_busy if link_busy else None,
        "copy_gbps_median": statistics.median(per_copy) if per_copy else None,
        "link_idle_ms": (span - link_busy) / 1e6 if copies else None,
        "head_ms": (link[0][0] - gpu_start) / 1e6 if link else None,
        "tail_ms": (gpu_end - link[-1][1]) / 1e6 if link else None,
    }


COLUMNS = [
    ("cell", lambda r: str(r["cell"]["cell_id"])),
    ("model", lambda r: r["cell"]["model"]),
    ("dtype", lambda r: r["cell"]["dtype"]),
    ("backend", lambda r: r["cell"]["backend"]),
    ("prefetch", lambda r: r["cell"]["prefetch"]),
    ("streams", lambda r: str(r["cell"]["streams"])),
    ("budget", lambda r: r["cell"]["budget"]),
    ("evict", lambda r: r["cell"]["evict"]),
    ("timed ms", lambda r: fmt(r["cell"]["latency_median_ms"])),
    ("traced ms", lambda r: fmt(r["traced_ms"])),
    ("compute busy ms", lambda r: fmt(r["compute_busy_ms"])),
    ("idle, link busy ms", lambda r: fmt(r["idle_waiting_ms"])),
    ("idle, link idle ms", lambda r: fmt(r["idle_other_ms"])),
    ("HtoD GB", lambda r: fmt(r["htod_gb"], 2)),
    ("link busy ms", lambda r: fmt(r["link_busy_ms"])),
    ("GB/s while busy", lambda r: fmt(r["link_gbps"])),
    ("GB/s per copy (median)", lambda r: fmt(r["copy_gbps_median"])),
    ("link idle ms", lambda r: fmt(r["link_idle_ms"])),
    ("head ms", lambda r: fmt(r["head_ms"])),
    ("tail ms", lambda r: fmt(r["tail_ms"])),
]


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("databases", nargs="+")
    parser.add_argument("--cell", type=int, help="only this cell (with one database)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    rows = []
    for path in args.databases:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        query = "SELECT * FROM cells WHERE status = 'ok' AND trace_iterations > 0"
        params = ()
        if args.cell is not None:
            query += " AND cell_id = ?"
            params = (args.cell,)
        for cell in db.execute(query + " ORDER BY cell_id", params).fetchall():
            stats = cell_stats(db, cell)
            if stats is not None:
                rows.append(stats)
    if not rows:
        print("no traced cells found", file=sys.stderr)
        return 1
    table = [[f(r) for _, f in COLUMNS] for r in rows]
    headers = [name for name, _ in COLUMNS]
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
