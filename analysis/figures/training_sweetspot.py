"""The training sweet spot: per workload, each setting's tokens/s against its peak device memory at
each batch, the Pareto front over all of them (the most tokens/s measured within a memory), and
the batches that did not run because their memory did not fit, at the peak predicted for them."""
import math

import pandas as pd
from matplotlib.lines import Line2D

from figures.common import (Drawn, Skip, count_phrase, memory_unit, panel_grid, title_figure, value_text,
                            workload_title)
from figures.throughput import throughput
from figures.training import OOM, measured, training_cells
from figures.training_settings import SWEPT, by_setting, by_workload, named_settings

NAME = "training_sweetspot"
TITLE = "Training sweet spot: throughput vs peak memory"

# A point's memory: NVML's peak of the device, less what was in use before the cell.
PEAK = "gpu_peak_bytes"
# Where a batch that did not fit is drawn: the estimator's peak, stored for skipped cells too.
PREDICTED = "predicted_peak_bytes"
# The GPU's memory, which the runner compares the predicted need with (runs.gpu_memory_bytes).
CAPACITY = "gpu_memory_bytes"
# The GPU's memory is drawn where a panel's points reach at least this share of it: below, the
# line would squeeze every point against the axis (the caption gives it instead).
CAPACITY_SHOWN_FROM = 0.5
MARK = "x"
FRONT_COLOR = "#999999"


class Setting:
    """One setting of a workload: its label, its measured points (batch, memory, tps, repeats, one
    row per batch) and the batches that did not fit (batch, predicted, status, reason, cell_id)."""

    def __init__(self, label, points, misses):
        self.label = label
        self.points = points
        self.misses = misses


class Panel:
    """One workload: its label, its settings, the Pareto front over their points (memory, tps,
    setting, batch, by memory) and the memory of the GPUs its cells ran on (bytes)."""

    def __init__(self, label, settings, front, capacity):
        self.label = label
        self.settings = settings
        self.front = front
        self.capacity = capacity


POINT_COLUMNS = ["batch", "memory", "tps", "repeats"]
MISS_COLUMNS = ["batch", "predicted", "status", "reason", "cell_id"]


def pooled_points(cells):
    """Per batch, the setting's measured cells (with tps) as one point: the median of their peak and
    of their tokens/s over the cells that measured the same thing again (repeats, other protocol)."""
    rows = [dict(batch=batch, memory=float(group[PEAK].median()), tps=float(group["tps"].median()),
                 repeats=len(group)) for batch, group in cells.groupby(SWEPT, sort=True)]
    return pd.DataFrame(rows, columns=POINT_COLUMNS)


def did_not_fit(cells):
    """The cells whose memory did not fit (the runner's predicted OOM skips, CUDA's out of memory)
    and that have a predicted peak to be drawn at."""
    if PREDICTED not in cells:
        return cells.iloc[0:0]
    reasons = cells["reason"].fillna("").astype(str)
    return cells[(cells["status"] != "ok") & reasons.str.contains(OOM) & cells[PREDICTED].notna()]


def misses(cells, measured_batches):
    """One row per batch of the setting that did not fit and has no measured point (its first cell)."""
    rows = []
    for batch, group in did_not_fit(cells).groupby(SWEPT, sort=True):
        if batch in measured_batches:
            continue
        first = group.sort_values("cell_id").iloc[0]
        rows.append(dict(batch=batch, predicted=float(first[PREDICTED]), status=first["status"], reason=first["reason"],
                         cell_id=int(first["cell_id"])))
    return pd.DataFrame(rows, columns=MISS_COLUMNS)


def pareto_front(points):
    """The points (rows with memory and tps) that no other point beats: none within as much memory
    has as many tokens/s. In order of memory; each has more tokens/s than the one before."""
    ordered = points.sort_values(["memory", "tps"], ascending=[True, False], kind="stable")
    best, keep = -math.inf, []
    for index, tps in ordered["tps"].items():
        if tps > best:
            keep.append(index)
            best = tps
    return ordered.loc[keep].reset_index(drop=True)


class Sweetspot:
    """The figure's data: its panels, the workloads left without one ([(label, cells that did not
    fit)]: none measured), the setting parameters its labels name, and the cells it draws."""

    def __init__(self, panels, unmeasured, names, cells):
        self.panels = panels
        self.unmeasured = unmeasured
        self.names = names
        self.cells = cells


def sweetspot(cells, axes):
    """The Sweetspot of a database's cells: a Panel for each workload with a measured training cell
    of a GPU backend, in order. Apart from drawing so that tests can check it."""
    train = training_cells(cells)
    peak = pd.to_numeric(train[PEAK], errors="coerce") if PEAK in train else pd.Series(float("nan"), index=train.index)
    ok = train[measured(train) & (peak > 0)]
    if ok.empty:
        return Sweetspot([], [], [], ok)
    ok = throughput(ok)
    drawn = pd.concat([ok, did_not_fit(train)])
    names = named_settings(drawn, axes)
    panels, unmeasured = [], []
    for label, work in by_workload(drawn, axes):
        if not work["cell_id"].isin(ok["cell_id"]).any():
            unmeasured.append((label, len(work)))
            continue
        settings, points = [], []
        for setting, group in by_setting(work, axes, names):
            mine = group["cell_id"].isin(ok["cell_id"])
            pooled = pooled_points(group[mine])
            settings.append(Setting(setting, pooled, misses(group[~mine], set(pooled[SWEPT]))))
            points.append(pooled.assign(setting=setting))
        front = pareto_front(pd.concat(points, ignore_index=True))[["memory", "tps", "setting", SWEPT]]
        capacity = sorted({int(v) for v in pd.to_numeric(work[CAPACITY], errors="coerce").dropna()}) \
            if CAPACITY in work else []
        panels.append(Panel(label, settings, front, capacity))
    return Sweetspot(panels, unmeasured, names, drawn)


def panel_top(panel):
    """The most memory a panel draws a point or a ✕ at (bytes)."""
    tops = [s.points["memory"].max() for s in panel.settings if len(s.points)]
    tops += [s.misses["predicted"].max() for s in panel.settings if len(s.misses)]
    return max(tops)


def shown_capacity(panel):
    """The GPU memories drawn in a panel: those its points reach CAPACITY_SHOWN_FROM of."""
    return [c for c in panel.capacity if panel_top(panel) >= CAPACITY_SHOWN_FROM * c]


def annotated(points, front_batches):
    """The points whose batch is written beside them: the setting's largest, and those on the front."""
    batches = points[SWEPT]
    return points[(batches == batches.max()) | batches.isin(front_batches)]


def draw_panel(ax, panel, colors, markers):
    right = max([panel_top(panel), *shown_capacity(panel)])
    unit, scale = memory_unit(right)
    front = panel.front
    # The front first, wide and pale, so the settings' points read on top of it; it holds from its
    # last point on (no measured point has more tokens/s with more memory).
    xs = list(front["memory"] / scale) + [max(s.points["memory"].max() for s in panel.settings if len(s.points)) / scale]
    ys = list(front["tps"]) + [front["tps"].iloc[-1]]
    ax.step(xs, ys, where="post", color=FRONT_COLOR, linewidth=5.0, alpha=0.5, zorder=1, solid_capstyle="round",
            label="Pareto front")
    ax.scatter(front["memory"] / scale, front["tps"], s=110, facecolors="none", edgecolors="black", linewidths=1.0,
               zorder=3)
    for setting in panel.settings:
        color, p = colors[setting.label], setting.points
        if len(p):
            ax.plot(p["memory"] / scale, p["tps"], marker=markers[setting.label], markersize=5, linewidth=1.3,
                    color=color, zorder=4, label=setting.label)
            on_front = front.loc[front["setting"] == setting.label, SWEPT]
            for _, point in annotated(p, set(on_front)).iterrows():
                ax.annotate(value_text(point[SWEPT]), (point["memory"] / scale, point["tps"]), xytext=(4, 4),
                            textcoords="offset points", fontsize=7, color=color)
        if len(setting.misses):
            ax.scatter(setting.misses["predicted"] / scale, [0.0] * len(setting.misses), marker=MARK, s=60,
                       linewidths=2.0, color=color, zorder=5, clip_on=False, transform=ax.get_xaxis_transform())
    for capacity in shown_capacity(panel):
        ax.axvline(capacity / scale, color="black", linestyle=":", linewidth=1.2, label="GPU memory")
    # The ✕ are drawn in axes coordinates, which the data limits leave out.
    ax.set_xlim(0, right / scale * 1.06)
    ax.set_ylim(0, ax.dataLim.ymax * 1.1)
    ax.set_title(panel.label)
    ax.set_xlabel(f"peak device memory ({unit})")
    ax.set_ylabel("training throughput (tokens/s)")


def render(data):
    spot = sweetspot(data.cells, data.db.axes)
    panels, names = spot.panels, spot.names
    if not panels:
        raise Skip("the database has no measured training cell with a peak device memory (mode = \"train\", status "
                   f"ok, {PEAK}: a GPU backend's cell with NVML's readings).")
    labels = list(dict.fromkeys(s.label for panel in panels for s in panel.settings))
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    markers = {label: "os^vDP*X"[i % 8] for i, label in enumerate(labels)}
    fig, axes = panel_grid(len(panels), width=5.6, height=4.0)
    for ax, panel in zip(axes, panels):
        draw_panel(ax, panel, colors, markers)
    title_figure(fig, workload_title(spot.cells, data.cells, data.db.axes, apart=(*names, SWEPT)),
                 "one panel per workload; one line per setting (" + ", ".join(names) + "), its batches in order")
    handles = [Line2D([], [], color=colors[label], marker=markers[label], linewidth=1.3, label=label)
               for label in labels]
    handles.append(Line2D([], [], color=FRONT_COLOR, linewidth=5.0, alpha=0.5, marker="o", markerfacecolor="none",
                          markeredgecolor="black", markersize=9, label="Pareto front: the most tokens/s within the memory"))
    missed = [(panel, s) for panel in panels for s in panel.settings if len(s.misses)]
    if missed:
        handles.append(Line2D([], [], marker=MARK, linestyle="none", color="black", markersize=7, markeredgewidth=2.0,
                              label="did not fit: at its predicted peak (foot of the axis)"))
    if any(shown_capacity(panel) for panel in panels):
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.2, label="the GPU's memory"))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, framealpha=0.85)
    return Drawn(fig, caption(panels, spot.unmeasured, missed, names))


def caption(panels, unmeasured, missed, names):
    settings = sum(len(panel.settings) for panel in panels)
    points = sum(len(s.points) for panel in panels for s in panel.settings)
    repeated = any((s.points["repeats"] > 1).any() for panel in panels for s in panel.settings)
    text = ("The training sweet spot: per workload (one panel each; model, dtype, sequence length and any other "
            "workload parameter that differs), each setting's measured training steps, tokens/s (batch × sequence "
            f"length ÷ the median step) against the peak device memory ({PEAK}: NVML's peak of the device, less what "
            "was in use before the cell), one point per batch, joined in batch order; numbers beside points: the "
            "batch (each setting's largest, and those on the front). A setting is the backend, the variant and any "
            f"other placement parameter ({', '.join(names)}). "
            f"{count_phrase(len(panels), 'panel')}, {count_phrase(settings, 'setting')}, "
            f"{count_phrase(points, 'point')}.")
    if repeated:
        text += (" A point measured several times (cells that differ only in how they were measured: repeats, "
                 "iterations, seeds) is the median of their memory and of their tokens/s.")
    text += (" Wide grey steps: the Pareto front over every setting of the workload, the most tokens/s a measured "
             "point reached within that much memory; ringed: the points on it.")
    if missed:
        rows = [(s.label, row) for _, s in missed for row in s.misses.to_dict("records")]
        listed = "; ".join(f"{label} at batch {value_text(row[SWEPT])} ({row['reason']})" for label, row in rows[:4])
        more = f"; and {len(rows) - 4} more" if len(rows) > 4 else ""
        text += (f" ✕ at the foot of a panel: {count_phrase(len(rows), 'batch', 'batches')} that did not run or ran "
                 f"out of memory, at the peak the estimator predicted for them ({PREDICTED}), never on the front "
                 f"({listed}{more}).")
    drawn = {c for panel in panels for c in shown_capacity(panel)}
    left = {c for panel in panels for c in panel.capacity} - drawn
    if drawn:
        text += (f" Dotted: the GPU's memory ({CAPACITY}, {', '.join(gib(c) for c in sorted(drawn))}), which the runner "
                 "compares each cell's predicted need with.")
    if left:
        text += (f" The GPU's memory ({', '.join(gib(c) for c in sorted(left))}) is not drawn where a panel's points "
                 f"stay below {CAPACITY_SHOWN_FROM:.0%} of it.")
    if unmeasured:
        text += (" No batch measured, so no panel: "
                 + "; ".join(f"{label} ({count_phrase(n, 'cell')} that did not fit)" for label, n in unmeasured) + ".")
    return text


def gib(n):
    return f"{n / 2**30:.1f} GiB"
