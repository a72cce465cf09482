"""Training throughput and peak memory against the batch size: per model and sequence length, a
panel of tokens/s and one of peak memory, one line per precision and backend (and whatever else
tells the training cells apart), with the batches that were not measured (OOM, failed, skipped)
marked at the axis."""
import re

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from figures.common import (REPEAT_AXES, Drawn, Skip, count_phrase, error_bars_legend, error_bars_text, memory_unit,
                            over_repeats, panel_grid, series_label, title_figure, value_text, varying, workload_title)
from figures.throughput import throughput

NAME = "training_vs_batch"
TITLE = "Training throughput and memory vs batch size"

# What a panel holds and what its x axis sweeps: neither tells its lines apart.
PANEL = ("model", "seq")
SWEPT = "batch"
# What each line's label names, whether or not it differs: the precision and where the step ran.
ALWAYS_NAMED = ("dtype", "backend")
# A cell not measured because its memory did not fit: the runner's `predicted OOM` / `predicted
# host OOM` skips, CUDA's "out of memory", and the host's std::bad_alloc.
OOM = re.compile(r"\bOOM\b|out of memory|bad_alloc", re.IGNORECASE)
# The memory a cell's peak is: the device's (NVML) for GPU cells, the process's resident set for host cells.
GPU_PEAK = "gpu_peak_bytes"
HOST_PEAK = "peak_host_rss_bytes"
PREDICTED = "predicted_peak_bytes"
MARK = "x"


def training_cells(cells):
    """The cells of mode = "train" (all of them, measured or not)."""
    if "mode" not in cells:
        return cells.iloc[0:0]
    return cells[cells["mode"] == "train"]


def measured(cells):
    return (cells["status"] == "ok") & cells["latency_median_ms"].notna()


def not_measured_kind(cell):
    """"OOM" where the cell's reason says its memory did not fit, else its status."""
    reason = cell.get("reason")
    if cell["status"] != "ok" and isinstance(reason, str) and OOM.search(reason):
        return "OOM"
    return str(cell["status"]) if cell["status"] != "ok" else "no step measured"


def with_memory(cells):
    """The cells with `memory`: a GPU cell's measured device peak, a host cell's peak resident set."""
    gpu = cells[GPU_PEAK] if GPU_PEAK in cells else pd.Series(float("nan"), index=cells.index)
    host = cells[HOST_PEAK] if HOST_PEAK in cells else pd.Series(float("nan"), index=cells.index)
    predicted = cells[PREDICTED] if PREDICTED in cells else pd.Series(float("nan"), index=cells.index)
    is_host = cells["backend"] == "host"
    return cells.assign(memory=host.where(is_host, gpu).astype(float),
                        predicted=predicted.where(~is_host).astype(float))


class Line:
    """One line of a panel pair: its label, its measured points (over_repeats rows with tps, tps_lo,
    tps_hi, memory, memory_lo, memory_hi, predicted, repeats, by batch) and the batches it has no
    measured cell at (rows with batch, kind, status, reason, cell_id)."""

    def __init__(self, label, points, marks):
        self.label = label
        self.points = points
        self.marks = marks


def line_points(cells):
    """Per batch, the measured cells' throughput and memory, their repeats as one point: the median,
    the error bars their extremes (throughput measured once: at the 90th and 10th percentile latency)."""
    cells = with_memory(throughput(cells))
    tps = over_repeats(cells, SWEPT, "tps", "tps_lo", "tps_hi")
    cells = cells.assign(memory_lo=cells["memory"], memory_hi=cells["memory"])
    memory = over_repeats(cells, SWEPT, "memory", "memory_lo", "memory_hi")
    predicted = cells.groupby(SWEPT)["predicted"].median()
    points = tps.drop(columns=["memory", "predicted"]).merge(memory[[SWEPT, "memory", "memory_lo", "memory_hi"]],
                                                            on=SWEPT)
    points["predicted"] = points[SWEPT].map(predicted)
    return points.sort_values(SWEPT).reset_index(drop=True)


def line_marks(cells, points):
    """The line's batches without a measured cell: one row each (its first cell's status and reason)."""
    done = set(points[SWEPT]) if len(points) else set()
    rows = []
    for batch, group in cells[~measured(cells)].groupby(SWEPT, sort=True):
        if batch in done:
            continue
        first = group.sort_values("cell_id").iloc[0]
        rows.append(dict(batch=batch, kind=not_measured_kind(first), status=first["status"], reason=first["reason"],
                         cell_id=int(first["cell_id"])))
    return pd.DataFrame(rows, columns=["batch", "kind", "status", "reason", "cell_id"])


def line_key(axes):
    """The parameters whose values make a line: every one a matrix sets but the panel's, the swept
    batch and the repeat."""
    return [p for p in axes.parameters if p not in (*PANEL, SWEPT, *REPEAT_AXES)]


def label_names(train, axes):
    """The parameters the labels name: precision and backend, then every other line parameter that
    differs among the training cells, how they were measured (iterations, seed...) only where
    nothing else tells two lines apart."""
    key = [p for p in line_key(axes) if p in train]
    differing = varying(train, axes, exclude=(*PANEL, SWEPT, *REPEAT_AXES, *ALWAYS_NAMED))
    names = list(ALWAYS_NAMED) + [n for n in differing if n not in axes.protocol]
    # Compared within a panel: its lines must have labels of their own.
    if train.groupby([*PANEL, *key], dropna=False).ngroups > train.groupby([*PANEL, *names], dropna=False).ngroups:
        names = list(ALWAYS_NAMED) + differing
    return names


def training_panels(cells, axes):
    """[((model, seq), [Line])] for each model and sequence length with a measured training cell, in
    order; each Line a setting of the other parameters with a training cell there, measured or not.
    The figure's data, apart from drawing so that tests can check it."""
    train = training_cells(cells)
    if not measured(train).any():
        return []
    names = label_names(train, axes)
    key = [p for p in line_key(axes) if p in train]
    panels = []
    for panel, in_panel in train.groupby(list(PANEL), sort=True):
        if not measured(in_panel).any():
            continue
        lines = []
        for _, group in in_panel.groupby(key, dropna=False, sort=True):
            ok = group[measured(group)]
            points = line_points(ok) if len(ok) else pd.DataFrame(columns=[SWEPT])
            label = series_label(tuple(group.iloc[0][n] for n in names), names)
            lines.append(Line(label, points, line_marks(group, points)))
        panels.append((panel, lines))
    return panels


def mark_batches(ax, xs, color):
    """✕ at the foot of the axis at each batch in xs: where the line has no point."""
    ax.scatter(xs, [0.0] * len(xs), marker=MARK, s=60, linewidths=2.0, color=color, zorder=4, clip_on=False,
               transform=ax.get_xaxis_transform())


def batch_axis(ax, batches):
    ax.set_xscale("log", base=2)
    values = sorted(set(batches))
    ax.set_xticks(values, [value_text(v) for v in values])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("batch size (sequences per step)")
    pad = 2 ** 0.3
    ax.set_xlim(min(values) / pad, max(values) * pad)


def lines_memory_unit(lines):
    """(unit, bytes per unit) of a memory panel (common.memory_unit of what its lines draw)."""
    drawn = [line.points[c] for line in lines if len(line.points) for c in ("memory_hi", "predicted")]
    return memory_unit(pd.concat(drawn).max() if drawn else float("nan"))


def draw_line(ax, x, y, lo, hi, color, marker, label):
    err = [(y - lo).clip(lower=0), (hi - y).clip(lower=0)]
    ax.errorbar(x, y, yerr=err, marker=marker, markersize=5, capsize=3, linewidth=1.4, color=color, label=label)


def render(data):
    panels = training_panels(data.cells, data.db.axes)
    if not panels:
        raise Skip("the database has no measured training cell (mode = \"train\", status ok).")
    names = label_names(training_cells(data.cells), data.db.axes)
    labels = list(dict.fromkeys(line.label for _, lines in panels for line in lines))
    colors = {label: plt.get_cmap("tab10")(i % 10) for i, label in enumerate(labels)}
    markers = {label: "os^vDP*X"[i % 8] for i, label in enumerate(labels)}
    fig, axes = panel_grid(2 * len(panels), width=5.2, height=3.4)
    shown = training_cells(data.cells)
    shown = shown[shown.set_index(list(PANEL)).index.isin([p for p, _ in panels])]
    title_figure(fig, workload_title(shown, data.cells, data.db.axes, apart=(*names, *PANEL)),
                 f"one row of panels per model and seq; lines vary {', '.join(names)}")
    repeats, marks, predicted_drawn = [], [], False
    for (panel, lines), tps_ax, mem_ax in zip(panels, axes[0::2], axes[1::2]):
        where = f"{panel[0]}, seq {value_text(panel[1])}"
        unit, scale = lines_memory_unit(lines)
        batches = []
        for line in lines:
            color, p = colors[line.label], line.points
            if len(p):
                draw_line(tps_ax, p[SWEPT], p["tps"], p["tps_lo"], p["tps_hi"], color, markers[line.label], line.label)
                has = p.dropna(subset=["memory"])
                if len(has):
                    draw_line(mem_ax, has[SWEPT], has["memory"] / scale, has["memory_lo"] / scale,
                              has["memory_hi"] / scale, color, markers[line.label], line.label)
                ahead = p.dropna(subset=["predicted"])
                if len(ahead):
                    mem_ax.plot(ahead[SWEPT], ahead["predicted"] / scale, linestyle="--", linewidth=1.2, color=color)
                    predicted_drawn = True
                repeats += list(p["repeats"])
                batches += list(p[SWEPT])
            if len(line.marks):
                for ax in (tps_ax, mem_ax):
                    mark_batches(ax, list(line.marks[SWEPT]), color)
                marks += [(line.label, row) for row in line.marks.to_dict("records")]
                batches += list(line.marks[SWEPT])
        for ax in (tps_ax, mem_ax):
            batch_axis(ax, batches)
            ax.set_ylim(0, max(ax.dataLim.ymax, 0) * 1.08 or 1.0)
        tps_ax.set_title(f"{where}: throughput")
        tps_ax.set_ylabel("tokens/s (batch × seq ÷ median step)")
        mem_ax.set_title(f"{where}: peak memory")
        mem_ax.set_ylabel(f"peak memory ({unit})")
    # One legend for every panel: a line keeps its colour and marker in each.
    measured_labels = {line.label for _, lines in panels for line in lines if len(line.points)}
    handles = [Line2D([], [], color=colors[label], marker=markers[label], linewidth=1.4,
                      label=label if label in measured_labels else label + " (none measured)") for label in labels]
    if marks:
        handles.append(Line2D([], [], marker=MARK, linestyle="none", color="black", markersize=7, markeredgewidth=2.0,
                              label="not measured: OOM, failed or skipped (at the axis)"))
    if predicted_drawn:
        handles.append(Line2D([], [], linestyle="--", color="black", label="predicted peak (GPU cells)"))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, framealpha=0.85,
               title=error_bars_legend(repeats).replace("\n", "; "))
    return Drawn(fig, caption(panels, repeats, marks, predicted_drawn))


def caption(panels, repeats, marks, predicted_drawn):
    lines = sum(len(lines) for _, lines in panels)
    points = sum(len(line.points) for _, lines in panels for line in lines)
    text = ("Training steps (mode = \"train\": forward with the loss, backward, gradient clipping and AdamW) against "
            f"the batch size, per model and sequence length ({count_phrase(lines, 'line')}, "
            f"{count_phrase(points, 'point')}, {count_phrase(len(panels), 'row')} of panels). "
            "Left: tokens per second, batch × sequence length ÷ the median step. Right: the peak memory, the "
            f"device's for GPU cells ({GPU_PEAK}: NVML's peak less what was in use before the cell), the process's "
            f"resident set for host cells ({HOST_PEAK})")
    text += (f"; dashed: the estimator's predicted peak ({PREDICTED}), stored before the GPU cell ran. "
             if predicted_drawn else ". ")
    text += error_bars_text(repeats, "throughput at the 90th and 10th percentile step; memory, none (one reading)")
    if marks:
        kinds = pd.Series([row["kind"] for _, row in marks]).value_counts()
        listed = "; ".join(f"{label} at batch {value_text(row[SWEPT])} ({row['kind']}: {row['reason'] or 'no reason'})"
                           for label, row in marks[:6])
        more = f"; and {len(marks) - 6} more" if len(marks) > 6 else ""
        text += (f" ✕ at the foot of a panel: a batch the line has no measured cell at, "
                 + ", ".join(f"{n} {k}" for k, n in kinds.items()) + f" ({listed}{more}). OOM: a reason naming "
                 "a predicted or an actual out-of-memory.")
    return text
