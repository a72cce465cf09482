"""Where the time of a traced iteration goes: compute, waiting for weights, and the host link.

For one cell's first traced iteration (its NVTX range 'traced iteration 0'): how long the compute
stream (the stream with the most kernels) was busy; how long it sat idle while a host-to-device
copy or Unified Memory migration was running (waiting for weights) and while none was; how long
the link carried such transfers, the rate it moved while busy, and how long it was idle before the
first and after the last transfer. This is the evidence behind a cell's ratio to its bound: a
link-bound forward takes streamed bytes / link rate + the compute left after the last copy (tail).
"""
import statistics

HTOD_KINDS = (1, 11)  # CUPTI memcpy kind host-to-device, and Unified Memory host-to-device migrations
ITERATION = "traced iteration 0"


def union(intervals):
    """Merged, sorted, non-overlapping [start, end] intervals."""
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def length(intervals):
    return sum(e - s for s, e in intervals)


def overlap(a, b):
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


def traced_cells(con):
    """cell_ids that have a traced iteration range, in order."""
    rows = con.execute(
        "SELECT DISTINCT n.cell_id FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE COALESCE(n.text, s.value) = ? ORDER BY n.cell_id",
        (ITERATION,),
    ).fetchall()
    return [r[0] for r in rows]


def traced_window(con, cell_id):
    """(start, end) of cell_id's first traced iteration range on the host, or None."""
    return con.execute(
        "SELECT n.start, n.\"end\" FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.cell_id = ? AND COALESCE(n.text, s.value) = ?",
        (cell_id, ITERATION),
    ).fetchone()


def time_split(con, cell_id):
    """The split of cell_id's first traced iteration (times in ms, bytes in GB), or None without one."""
    window = traced_window(con, cell_id)
    if window is None:
        return None
    host_start, host_end = window
    # GPU work enqueued inside the range may finish after the host leaves it; the next iteration's
    # range starts later, so everything that starts before the host range ends belongs to it.
    kernels = con.execute(
        "SELECT start, \"end\", streamId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE cell_id = ? AND start >= ? AND start < ?",
        (cell_id, host_start, host_end),
    ).fetchall()
    copies = con.execute(
        "SELECT start, \"end\", bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE cell_id = ? AND copyKind IN (?, ?) "
        "AND start >= ? AND start < ?",
        (cell_id, *HTOD_KINDS, host_start, host_end),
    ).fetchall()
    if not kernels:
        return None
    per_stream = {}
    for _, _, stream in kernels:
        per_stream[stream] = per_stream.get(stream, 0) + 1
    compute_stream = max(per_stream, key=per_stream.get)
    compute = union([(s, e) for s, e, st in kernels if st == compute_stream])
    gpu_start = min([compute[0][0]] + [s for s, _, _ in copies])
    gpu_end = max([compute[-1][1]] + [e for _, e, _ in copies])
    idle = union([(a[1], b[0]) for a, b in zip(compute, compute[1:])] + [(gpu_start, compute[0][0])])
    link = union([(s, e) for s, e, _ in copies])
    link_busy = length(link)
    moved = sum(b for _, _, b in copies)
    waiting = overlap(idle, link)
    large = [b / (e - s) for s, e, b in copies if e > s and b >= (1 << 20)]
    return {
        "traced_ms": (gpu_end - gpu_start) / 1e6,
        "compute_busy_ms": length(compute) / 1e6,
        "idle_waiting_ms": waiting / 1e6,
        "idle_other_ms": (length(idle) - waiting) / 1e6,
        "htod_gb": moved / 1e9,
        "link_busy_ms": link_busy / 1e6,
        "link_gbps": moved / link_busy if link_busy else None,
        "copy_gbps_median": statistics.median(large) if large else None,
        "link_idle_ms": (gpu_end - gpu_start - link_busy) / 1e6 if copies else None,
        "head_ms": (link[0][0] - gpu_start) / 1e6 if link else None,
        "tail_ms": (gpu_end - link[-1][1]) / 1e6 if link else None,
    }


def transfers(con, cell_id, gap_ns=20_000):
    """The host-to-device transfers of cell_id's first traced iteration, one per burst (records less
    than gap_ns apart: a UM prefetch arrives as many migration records), each with the host's NVTX
    phase (acquire / compute / release, and its layer) open when the burst began. A host phase much
    longer than its transfer shows the host held up in that call: the evidence that a prefetch call
    blocks its thread, or that the host enqueued too late. Times in ms from the iteration's start;
    None without a traced iteration."""
    window = traced_window(con, cell_id)
    if window is None:
        return None
    host_start, host_end = window
    records = con.execute(
        "SELECT start, \"end\", bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE cell_id = ? AND copyKind IN (?, ?) "
        "AND start >= ? AND start < ? ORDER BY start",
        (cell_id, *HTOD_KINDS, host_start, host_end),
    ).fetchall()
    ranges = con.execute(
        "SELECT n.start, n.\"end\", COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
        "ON s.id = n.textId WHERE n.cell_id = ? AND n.start >= ? AND n.start < ? ORDER BY n.start",
        (cell_id, host_start, host_end),
    ).fetchall()
    phases = [r for r in ranges if r[2] in ("acquire", "compute", "release")]
    layers = [r for r in ranges if r[2] in ("embedding", "head") or r[2].startswith("layer ")]
    bursts = []
    for s, e, b in records:
        if bursts and s - bursts[-1][1] < gap_ns:
            bursts[-1][1] = max(bursts[-1][1], e)
            bursts[-1][2] += b
        else:
            bursts.append([s, e, b])

    def open_at(candidates, t):
        """The last of the ranges (sorted by start) open at time t."""
        found = None
        for s, e, text in candidates:
            if s > t:
                break
            if e >= t:
                found = (s, e, text)
        return found

    result = []
    for s, e, b in bursts:
        phase = open_at(phases, s)
        layer = open_at(layers, s)
        result.append({
            "start_ms": (s - host_start) / 1e6,
            "mb": b / 1e6,
            "ms": (e - s) / 1e6,
            "gbps": b / (e - s) if e > s else None,
            "host_phase": f"{phase[2]} ({layer[2]})" if phase and layer else (phase[2] if phase else "-"),
            "host_phase_ms": (phase[1] - phase[0]) / 1e6 if phase else None,
        })
    return result


# Heading, key and digits of each column of transfers(), in display order.
TRANSFER_COLUMNS = [
    ("start ms", "start_ms", 3),
    ("MB", "mb", 1),
    ("transfer ms", "ms", 3),
    ("GB/s", "gbps", 1),
    ("host phase ms", "host_phase_ms", 3),
]


# Heading, key and digits of each measured column, in display order.
COLUMNS = [
    ("traced ms", "traced_ms", 1),
    ("compute busy ms", "compute_busy_ms", 1),
    ("idle, link busy ms", "idle_waiting_ms", 1),
    ("idle, link idle ms", "idle_other_ms", 1),
    ("HtoD GB", "htod_gb", 2),
    ("link busy ms", "link_busy_ms", 1),
    ("GB/s while busy", "link_gbps", 1),
    ("GB/s per copy (median)", "copy_gbps_median", 1),
    ("link idle ms", "link_idle_ms", 1),
    ("head ms", "head_ms", 1),
    ("tail ms", "tail_ms", 1),
]


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"
