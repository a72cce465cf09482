"""What every figure shares: the print style, backend colours, how a figure says it has no data,
and the labels that tell series apart."""
import math
import os

import matplotlib

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


def workload_label(cell):
    """"gpt2_small fp32 1×1024": what a lone series measured, when nothing tells series apart."""
    return f"{cell['model']} {cell['dtype']} {cell['batch']}×{cell['seq']}"


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
