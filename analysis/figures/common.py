"""What every figure shares: the print style, backend colours, how a figure says it has no data,
its title (the workload it holds and what tells its series apart), the labels that tell series
apart, how repeats become error bars, and how a ratio's axis is drawn."""
import math
import os

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# Sizes in points at the saved figure size: readable when a figure is printed at column width.
STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 12,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "svg.hashsalt": "sweetspot",  # the same database gives the same SVG
}

# Okabe and Ito's palette, which readers with any common colour-vision deficiency tell apart, and
# greys that differ in lightness alone. The timeline and the Unified Memory figures draw in these.
OKABE_ITO = {"orange": "#E69F00", "sky blue": "#56B4E9", "bluish green": "#009E73", "yellow": "#F0E442",
             "blue": "#0072B2", "vermillion": "#D55E00", "reddish purple": "#CC79A7"}
GREYS = {"black": "#000000", "dark grey": "#666666", "grey": "#999999", "light grey": "#C8C8C8"}
PALETTE = {**OKABE_ITO, **GREYS}

# By migrationCause (unknown, user prefetch, page fault, speculative prefetch, eviction, access
# counters). Fault-driven migrations and the driver's speculative prefetches around them
# take hues far apart (vermillion, sky blue): in uvm cells the prefetches carry most of the bytes.
CAUSE_COLORS = {0: PALETTE["grey"], 1: PALETTE["blue"], 2: PALETTE["vermillion"], 3: PALETTE["sky blue"],
                4: PALETTE["reddish purple"], 5: PALETTE["dark grey"]}

BACKEND_COLORS = {
    "device": "#1b9e77",
    "explicit-copy": "#d95f02",
    "uvm": "#7570b3",
    "uvm-prefetch": "#e7298a",
    "host": "#66a61e",
}
BACKEND_ORDER = list(BACKEND_COLORS)


class Skip(Exception):
    """The database has no data for a figure; the message says why, for the reader."""


class Drawn:
    """A figure with its caption: what was measured, and how to read it."""

    def __init__(self, figure, caption):
        self.figure = figure
        self.caption = caption


def apply_style():
    plt.rcParams.update(STYLE)


def save(figure, out_dir, name):
    """`name`.svg and `name`.png in out_dir, cropped to what the figure draws (as savefig.bbox = tight
    would, but finding that box once for both files: it takes a draw of its own), then closed."""
    if plt.rcParams["savefig.dpi"] != "figure":
        figure.set_dpi(plt.rcParams["savefig.dpi"])
    figure.draw_without_rendering()
    box = figure.get_tightbbox(figure.canvas.get_renderer()).padded(plt.rcParams["savefig.pad_inches"])
    # No date in the SVG: the same database gives the same file.
    figure.savefig(os.path.join(out_dir, f"{name}.svg"), bbox_inches=box, metadata={"Date": None})
    figure.savefig(os.path.join(out_dir, f"{name}.png"), bbox_inches=box)
    plt.close(figure)


def backend_color(backend):
    return BACKEND_COLORS.get(backend, "#666666")


def backends_in(cells):
    """The backends present, in the documented order."""
    present = set(cells["backend"])
    return [b for b in BACKEND_ORDER if b in present] + sorted(present - set(BACKEND_ORDER))


def panel_grid(n, width=5.0, height=3.6, max_cols=2):
    """A figure of n panels, at most max_cols per row; returns (figure, flat list of axes)."""
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def value_text(v):
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def varying(cells, axes, exclude=()):
    """The parameters (of `axes`, analysis/axes.py) that take more than one value among `cells`:
    those a label must name."""
    return [p for p in axes.parameters if p in cells and p not in exclude and cells[p].astype(str).nunique() > 1]


def series_label(key, names):
    """"budget=50% prefetch=2" for a group's key over the parameters `names`."""
    values = key if isinstance(key, tuple) else (key,)
    return " ".join(f"{n}={value_text(v)}" for n, v in zip(names, values))


def values_text(values):
    """"1024" for one value; "1–64" for several numbers (their range); "tiny/gpt2_small" for several
    words; "–" for none recorded."""
    unique = values.dropna().unique()
    if len(unique) == 0:
        return "–"
    if len(unique) == 1:
        return value_text(unique[0])
    if pd.api.types.is_numeric_dtype(values):
        return f"{value_text(min(unique))}–{value_text(max(unique))}"
    return "/".join(sorted(str(v) for v in unique))


# What every figure's title names first, as "model dtype, batch B × seq S".
NAMED_WORKLOAD = ("model", "dtype", "batch", "seq")


def workload_title(shown, cells, axes, apart=()):
    """"gpt2_1.5b fp32, batch 1 × seq 1024": the workload of the cells a figure shows (`shown`), out of
    the `cells` it could show. Beside model, dtype, batch and sequence length it names each other
    workload parameter (analysis/axes.py) that takes more than one value among `cells`, so a figure of
    only the tf32 cells says so, but for those that tell the figure's lines or bars apart (`apart`):
    its title names those next."""
    def text(p):
        return values_text(shown[p]) if p in shown else "?"

    title = f"{text('model')} {text('dtype')}, batch {text('batch')} × seq {text('seq')}"
    others = [p for p in axes.parameters if p in axes.workload and p not in (*NAMED_WORKLOAD, *apart) and p in cells
              and cells[p].astype(str).nunique() > 1]
    return title + "".join(f", {p}={values_text(shown[p])}" for p in others)


def title_figure(fig, workload, varies):
    """Sets the figure's title: its workload (workload_title), then what tells its lines, bars or
    points apart, so that the figure reads without the page around it."""
    fig.suptitle(f"{workload}\n{varies}")


def panels_and_lines(panels, names):
    """"one panel per backend; lines vary budget, prefetch": what tells a sweep's panels (`panels`: one
    per what) and its lines (the parameter `names` their labels name) apart."""
    return f"one panel per {panels}; " + (f"lines vary {', '.join(names)}" if names else "one line each")


# Cells that differ only in these measured the same thing again: a figure draws them as one point,
# with their spread as its error bars.
REPEAT_AXES = ("repeat",)


def over_repeats(cells, key, y, y_lo, y_hi):
    """One row per value of the column `key` (the other columns from its first cell), with `repeats`,
    the number of its cells. A point of several cells is the median of their y, its error bar ends
    y_lo and y_hi the lowest and highest of their y (the run-to-run spread); a point of one cell keeps
    its own."""
    rows = []
    for _, group in cells.groupby(key, dropna=False, sort=True):
        row = group.iloc[0].copy()
        row["repeats"] = len(group)
        if len(group) > 1:
            row[y], row[y_lo], row[y_hi] = group[y].median(), group[y].min(), group[y].max()
        rows.append(row)
    return pd.DataFrame(rows)


def error_bars_text(repeats, single):
    """The caption's sentence on what the error bars of points with `repeats` cells each span; `single`:
    what they span at a point of one cell."""
    most = max(repeats, default=1)
    if most == 1:
        return f"Error bars: {single}."
    text = (f"A point measured in several repeats (cells that differ only in `repeat`, up to {most}) is their "
            "median, its error bars their lowest and highest value")
    if min(repeats) == 1:
        return text + f"; at a point measured once, error bars: {single}."
    return text + "."


def error_bars_legend(repeats):
    """The legend's title: what a point and its error bars are."""
    most = max(repeats, default=1)
    if most == 1:
        return "error bars: iterations' p10–p90"
    text = "point: median of repeats\nerror bars: their min–max"
    return text + ("\n(measured once: iterations' p10–p90)" if min(repeats) == 1 else "")


def ratio_axis(ax, label):
    """A ratio's y axis: from zero where linear; a log axis cannot start at zero, and its label says so."""
    if ax.get_yscale() == "log":
        ax.set_ylabel(f"{label} (log scale, not from 0)")
    else:
        ax.set_ylabel(label)
        ax.set_ylim(0, ax.dataLim.ymax * 1.05)


def memory_unit(top):
    """(unit, bytes per unit) of a memory axis reaching `top` bytes: GiB from 1 GiB on, MiB below,
    where GiB would read 0.0…"""
    return ("GiB", 2**30) if top >= 2**30 else ("MiB", 2**20)


def count_phrase(n, singular, plural=None):
    """"1 cell", "3 cells"."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def require_gpu_cells(cells, what):
    """Skips a GPU-only figure on a database of host-backend cells, naming what the host backend lacks."""
    if len(cells) == 0:
        raise Skip("the database has no cells.")
    if set(cells["backend"]) == {"host"}:
        raise Skip(f"this database holds only host-backend cells (the CPU forward), which have no {what}; "
                   "the figure needs cells of the GPU backends.")
