"""The timeline of one traced iteration: NVTX layers and phases as the GPU ran them, kernels and
copies per stream, UM migrations by direction and cause, GPU and CPU page faults (the same events
`sweetspot trace` exports)."""
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from figures.common import CAUSE_COLORS, PALETTE, Drawn, Skip, count_phrase, require_gpu_cells
from figures.um_traffic import cause_labels
from results_db import BadInput

NAME = "timeline"
TITLE = "Timeline of one traced iteration"

ITERATION = "traced iteration 0"
NEEDED = ("NVTX_EVENTS", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS")
# The NVTX phases in light tints of three palette hues, so the GPU activity drawn over the same
# time reads as the foreground.
PHASE_COLORS = {"acquire": "#F5D9A6", "compute": "#BBE1F5", "release": "#EBC9DC"}
LAYER_COLORS = (PALETTE["light grey"], PALETTE["grey"])  # alternate, so neighbouring layers stay apart
KERNEL_COLOR = PALETTE["bluish green"]
COPY_COLORS = {1: PALETTE["orange"], 2: PALETTE["yellow"]}  # host→device, and any other explicit copy
GPU_FAULT_COLOR = PALETTE["black"]
CPU_FAULT_COLOR = PALETTE["dark grey"]
# Events narrower than this share of the window are drawn this wide, so that short copies and
# faults stay visible at print resolution.
MIN_WIDTH_SHARE = 0.0005
# A track with more bars than this is drawn as an image inside the SVG: a uvm cell's hundreds of
# thousands of migrations would otherwise make a file of many megabytes.
DENSE_TRACK_BARS = 500


def windows(db):
    """cell_id → (start, end) ns of its first traced iteration's NVTX range (which closes after the GPU finished)."""
    df = db.query('SELECT n.cell_id, n.start, n."end" FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId '
                  "WHERE s.value = ?", (ITERATION,))
    return {r.cell_id: (r.start, r.end) for r in df.itertuples()}


# The events of a cell that overlap its window, as `sweetspot trace` selects them; parameters
# (cell_id, window end, window start).
KERNELS = 'FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE cell_id = ? AND start < ? AND "end" > ?'
COPIES = 'FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE cell_id = ? AND start < ? AND "end" > ?'
GPU_FAULTS = 'FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS WHERE cell_id = ? AND start < ? AND "end" >= ?'
CPU_FAULTS = "FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS WHERE cell_id = ? AND start <= ? AND start >= ?"
UM = "copyKind IN (11, 12)"


def ranges(db, cell_id, begin, end):
    """The cell's NVTX ranges inside [begin, end] as the GPU ran them (nvtx_gpu_proj_trace: from the
    first kernel or copy each launched to the end of the last), where the cell recorded the API calls
    that project them; else as the host ran them. Returns (start/end/text DataFrame, projected)."""
    if db.has("nvtx_gpu_proj_trace", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        projected = db.query('SELECT projected_start AS start, projected_end AS "end", name AS text '
                             "FROM nvtx_gpu_proj_trace WHERE cell_id = ? AND orig_start >= ? AND orig_end <= ? "
                             "ORDER BY projected_start, lvl", (cell_id, begin, end))
        if len(projected):
            return projected, True
    host = db.query('SELECT n.start, n."end", s.value AS text FROM NVTX_EVENTS n JOIN StringIds s '
                    'ON s.id = n.textId WHERE n.cell_id = ? AND n.start >= ? AND n."end" <= ? ORDER BY n.start',
                    (cell_id, begin, end))
    return host, False


def events(db, cell_id, begin, end):
    """Every event of the cell that overlaps [begin, end], as DataFrames by kind, and whether its
    NVTX ranges are projected onto the GPU."""
    window = (cell_id, end, begin)
    nvtx, projected = ranges(db, cell_id, begin, end)
    return {
        "kernels": db.query('SELECT start, "end", streamId ' + KERNELS, window),
        "copies": db.query('SELECT start, "end", streamId, copyKind, bytes, coalesce(migrationCause, 0) AS cause '
                           + COPIES, window),
        "gpu_faults": db.query('SELECT start, "end", numberOfPageFaults ' + GPU_FAULTS, window),
        "cpu_faults": db.query("SELECT start " + CPU_FAULTS, window),
        "ranges": nvtx,
        "projected": projected,
    }


def richness(db, cell_id, begin, end):
    """How much of the machinery an iteration shows, legibly: UM activity first, then the number of
    tracks, then the fewest events (a thinner timeline reads better). Counted in SQL, since traced
    cells of large models hold many events."""
    window = (cell_id, end, begin)

    def scalar(sql, params=window):
        return db.con.execute(sql, params).fetchone()[0]

    streams = scalar(f"SELECT count(*) FROM (SELECT streamId {KERNELS} UNION SELECT streamId {COPIES} AND NOT {UM})",
                     window + window)
    um_directions = scalar(f"SELECT count(DISTINCT copyKind) {COPIES} AND {UM}")
    faults = [scalar(f"SELECT count(*) {GPU_FAULTS}"), scalar(f"SELECT count(*) {CPU_FAULTS}")]
    events = scalar(f"SELECT count(*) {KERNELS}") + scalar(f"SELECT count(*) {COPIES}") + sum(faults)
    tracks = streams + um_directions + sum(1 for n in faults if n)
    return (bool(um_directions or any(faults)), tracks, -events)


def require_window(db, cell_id):
    """Refuses a cell the user asked for that has no traced iteration to draw."""
    found = windows(db) if db.has(*NEEDED) else {}
    if cell_id not in found:
        raise BadInput(f"cell {cell_id} has no '{ITERATION}' range: it needs trace_iterations > 0 and the cupti "
                       "collector (cells with one: " + (", ".join(map(str, sorted(found))) or "none") + ")")


def choose(db, data, found):
    """The cell to draw: the one asked for, or the richest traced cell (lowest id on ties)."""
    if data.timeline_cell is not None:
        return data.timeline_cell, events(db, data.timeline_cell, *found[data.timeline_cell])
    cell_id = max(sorted(found), key=lambda c: richness(db, c, *found[c]))
    return cell_id, events(db, cell_id, *found[cell_id])


def render(data):
    require_gpu_cells(data.cells, "GPU streams or CUPTI events to draw")
    db = data.db
    if not db.has(*NEEDED):
        raise Skip("this database has no event tables (it was written before sweetspot recorded CUPTI events).")
    found = windows(db)
    if not found:
        raise Skip(f"no cell has a recorded '{ITERATION}' NVTX range: traced iterations (trace_iterations > 0) of GPU "
                   "cells run with the cupti collector record one.")
    cell_id, ev = choose(db, data, found)
    begin, end = found[cell_id]
    cell = data.cells.set_index("cell_id").loc[cell_id]
    fig = draw(ev, begin, end, cause_labels(db), title(cell_id, cell))
    return Drawn(fig, caption(cell_id, cell, ev, data.timeline_cell is not None, traced_against_timed(db, cell_id)))


def title(cell_id, cell):
    """"Cell 4: gpt2_1.5b fp32, batch 1 × seq 1024, uvm, budget 50%, prefetch off, streams 1": the cell
    the timeline shows."""
    return (f"Cell {cell_id}: {cell['model']} {cell['dtype']}, batch {cell['batch']} × seq {cell['seq']}, "
            f"{cell['backend']}, budget {cell['budget']}, prefetch {cell['prefetch']}, streams {cell['streams']}")


def traced_against_timed(db, cell_id):
    """(median of the traced iterations, of the timed ones) in ms, or None where either is missing."""
    rows = db.query("SELECT phase, latency_ms FROM iterations WHERE cell_id = ? AND phase IN ('timed', 'traced')",
                    (int(cell_id),))
    medians = rows.groupby("phase")["latency_ms"].median()
    if "timed" not in medians or "traced" not in medians:
        return None
    return medians["traced"], medians["timed"]


class Tracks:
    """Rows of the timeline, top to bottom, each a list of (start, width, colour) bars in ms."""

    def __init__(self, begin, end, names):
        self.begin = begin
        self.min_width = (end - begin) / 1e6 * MIN_WIDTH_SHARE
        self.rows = {name: [] for name in names}

    def add(self, row, start_ns, end_ns, color):
        start = (start_ns - self.begin) / 1e6
        self.rows[row].append((start, max((end_ns - start_ns) / 1e6, self.min_width), color))

    def used(self):
        self.rows = {name: bars for name, bars in self.rows.items() if bars}
        return self


def nvtx_rows(ev):
    """The names of the NVTX tracks: (layers, phases), saying whether they show GPU or host time."""
    where = "GPU" if ev.get("projected") else "host"
    return f"NVTX layers ({where})", f"NVTX phases ({where})"


UM_DIRECTIONS = {11: "host→device", 12: "device→host"}


def um_row(copy_kind, cause, causes):
    """The track of a UM migration: one per direction and cause, since a uvm cell's migrations of
    different causes interleave too finely to tell apart by colour within one track."""
    return f"UM {UM_DIRECTIONS[copy_kind]}: {causes.get(cause, cause)}"


def layout(ev, begin, end, causes):
    """The tracks that have events, in a fixed order, and the layer ranges."""
    streams = sorted(set(ev["kernels"]["streamId"]) | set(ev["copies"].query("copyKind not in [11, 12]")["streamId"]))
    layer_row, phase_row = nvtx_rows(ev)
    um = ev["copies"][ev["copies"]["copyKind"].isin(list(UM_DIRECTIONS))]
    um_rows = [um_row(kind, cause, causes) for kind in UM_DIRECTIONS for cause in sorted(set(um["cause"]))]
    tracks = Tracks(begin, end, [layer_row, phase_row] + [f"stream {s}" for s in streams] + um_rows
                    + ["GPU page faults", "CPU page faults"])
    layers = ev["ranges"][~ev["ranges"]["text"].isin(PHASE_COLORS) &
                          ~ev["ranges"]["text"].str.startswith(("traced iteration", "cell"))]
    for i, r in enumerate(layers.itertuples()):
        tracks.add(layer_row, r.start, r.end, LAYER_COLORS[i % 2])
    for r in ev["ranges"][ev["ranges"]["text"].isin(PHASE_COLORS)].itertuples():
        tracks.add(phase_row, r.start, r.end, PHASE_COLORS[r.text])
    for r in ev["kernels"].itertuples():
        tracks.add(f"stream {r.streamId}", r.start, r.end, KERNEL_COLOR)
    for r in ev["copies"].itertuples():
        if r.copyKind in (11, 12):
            row = um_row(r.copyKind, r.cause, causes)
            tracks.add(row, r.start, r.end, CAUSE_COLORS.get(r.cause, CAUSE_COLORS[0]))
        else:
            tracks.add(f"stream {r.streamId}", r.start, r.end, COPY_COLORS.get(r.copyKind, COPY_COLORS[2]))
    for r in ev["gpu_faults"].itertuples():
        tracks.add("GPU page faults", r.start, r.end, GPU_FAULT_COLOR)
    for r in ev["cpu_faults"].itertuples():
        tracks.add("CPU page faults", r.start, r.start, CPU_FAULT_COLOR)
    return tracks.used(), layers


def coalesce(bars, gap):
    """(start, width) bars joined where they overlap or lie less than `gap` apart, in start order.
    `gap` is the narrowest bar drawn, under a pixel at print resolution: the joined bars look the
    same, and a uvm cell's hundreds of thousands of migrations become a few thousand bars to draw."""
    if not bars:
        return []
    order = np.argsort([s for s, _ in bars], kind="stable")
    starts = np.array([bars[i][0] for i in order])
    ends = np.maximum.accumulate(starts + np.array([bars[i][1] for i in order]))
    first = np.concatenate(([True], starts[1:] > ends[:-1] + gap))
    group_starts = starts[first]
    group_ends = ends[np.concatenate((np.flatnonzero(first)[1:] - 1, [len(starts) - 1]))]
    return list(zip(group_starts.tolist(), (group_ends - group_starts).tolist()))


def draw(ev, begin, end, causes, heading):
    tracks, layers = layout(ev, begin, end, causes)
    names = list(tracks.rows)
    fig, ax = plt.subplots(figsize=(10.0, 1.9 + 0.45 * len(names)))
    for y, name in enumerate(names):
        bars = tracks.rows[name]
        for color in dict.fromkeys(c for _, _, c in bars):
            merged = coalesce([(s, w) for s, w, c in bars if c == color], tracks.min_width)
            ax.broken_barh(merged, (y - 0.38, 0.76), facecolors=color, rasterized=len(merged) > DENSE_TRACK_BARS)
    span_ms = (end - begin) / 1e6
    layer_row = nvtx_rows(ev)[0]
    if layer_row in tracks.rows:
        for r in layers.itertuples():
            if (r.end - r.start) / 1e6 > 0.04 * span_ms:
                ax.text((r.start + r.end - 2 * begin) / 2e6, names.index(layer_row),
                        r.text.replace("layer ", "L"), ha="center", va="center", fontsize=9)
    ax.set_title(heading)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(len(names) - 0.5, -0.5)
    ax.set_xlim(0, span_ms)
    ax.set_xlabel("time since the iteration started (ms)")
    ax.grid(axis="y", visible=False)
    ax.legend(handles=legend_handles(ev, causes), loc="upper center", bbox_to_anchor=(0.5, -0.5 / (1 + 0.3 * len(names))),
              ncol=4, framealpha=0.85)
    fig.tight_layout()
    return fig


def legend_handles(ev, causes):
    handles = [Patch(color=c, label=f"NVTX {p}") for p, c in PHASE_COLORS.items() if (ev["ranges"]["text"] == p).any()]
    if len(ev["kernels"]):
        handles.append(Patch(color=KERNEL_COLOR, label="kernel"))
    copies = ev["copies"]
    if (copies["copyKind"] == 1).any():
        handles.append(Patch(color=COPY_COLORS[1], label="copy host→device"))
    if (~copies["copyKind"].isin([1, 11, 12])).any():
        handles.append(Patch(color=COPY_COLORS[2], label="other copy"))
    for cause in sorted(copies[copies["copyKind"].isin([11, 12])]["cause"].unique()):
        handles.append(Patch(color=CAUSE_COLORS.get(cause, CAUSE_COLORS[0]), label=f"UM: {causes.get(cause, cause)}"))
    if len(ev["gpu_faults"]):
        handles.append(Patch(color=GPU_FAULT_COLOR, label="GPU fault group"))
    if len(ev["cpu_faults"]):
        handles.append(Patch(color=CPU_FAULT_COLOR, label="CPU page fault"))
    return handles


def caption(cell_id, cell, ev, asked, timing=None):
    copies = ev["copies"]
    um = copies[copies["copyKind"].isin([11, 12])]
    plain = copies[~copies["copyKind"].isin([11, 12])]
    streams = set(ev["kernels"]["streamId"]) | set(plain["streamId"])
    text = (f"The first traced iteration of cell {cell_id} ({cell['model']}, {cell['backend']}, {cell['dtype']}, "
            f"batch {cell['batch']} × seq {cell['seq']}, streams {cell['streams']}, prefetch {cell['prefetch']}, "
            f"budget {cell['budget']}), from its NVTX range: {count_phrase(len(ev['kernels']), 'kernel')} and "
            f"{count_phrase(len(plain), 'copy', 'copies')} on "
            f"{count_phrase(len(streams), 'stream')}, {count_phrase(len(um), 'UM migration')} "
            f"({um['bytes'].sum() / 1e6:.1f} MB), {count_phrase(len(ev['gpu_faults']), 'GPU page-fault group')}, "
            f"{count_phrase(len(ev['cpu_faults']), 'CPU page fault')}, under the NVTX layer and phase ranges. "
            + ("The NVTX ranges are drawn as the GPU ran them: each from the first kernel or copy it launched to the "
               "end of the last (nvtx_gpu_proj_trace). " if ev.get("projected") else
               "The NVTX ranges are drawn in host time, which ends when the host has queued a range's work: this cell "
               "recorded no CUDA API calls to project them onto the GPU with. ")
            + "Events shorter than 0.05 % of the window are widened to stay visible; tracks of more than "
            f"{DENSE_TRACK_BARS} events are drawn as images in the SVG. ")
    htod = um[um["copyKind"] == 11]
    if htod["bytes"].sum() > 0 and (htod["cause"] == 3).any():
        share = htod[htod["cause"] == 3]["bytes"].sum() / htod["bytes"].sum()
        text += f"The driver's speculative prefetches moved {100 * share:.0f} % of the host→device bytes. "
    if timing is not None:
        traced, timed = timing
        text += (f"A traced iteration is not a timed one: the collector runs in it, and the traced iterations took "
                 f"{traced:.1f} ms (median) against {timed:.1f} ms timed, {traced / timed:.2f} × the latency the cell "
                 "reports. ")
    if not asked:
        text += ("Drawn for the traced cell with the most kinds of activity; `sweetspot report --timeline-cell ID` draws "
                 "another. ")
    return text + f"`sweetspot trace DB --cell {cell_id} -o cell{cell_id}.json` opens the same events in Perfetto."
