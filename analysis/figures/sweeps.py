"""A measured quantity against one swept parameter: one panel per backend, one line per setting of
the other parameters that was measured at two or more values of the swept one."""
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator

from figures.common import Skip, backends_in, panel_grid, series_label, value_text, varying, workload_label

# Lines beyond this many per panel are left out (the caption says how many): a legend longer
# than this cannot be read in print.
MAX_SERIES = 8
# Legends of more lines than this go below their panel, which grows to hold them: inside, they
# would hide the lines themselves.
LEGEND_INSIDE = 3


class Swept:
    """The parameter along x: its column, axis label, and where each value goes."""

    def __init__(self, column, label, order=None, log=False):
        self.column = column
        self.label = label
        self.order = order  # sort key of categorical values; None: the values are numbers
        self.log = log

    def ticks(self, values):
        """Categorical values: every value in `values` at 0, 1, 2... in order. Numbers: None."""
        if self.order is None:
            return None
        return sorted(set(values), key=self.order)

    def positions(self, values, ticks):
        if ticks is None:
            return values.astype(float)
        return values.map({v: i for i, v in enumerate(ticks)}).astype(float)


def series(cells, axes, swept, fixed_out):
    """(title, [(label, cells of one line)], lines left out) for every backend with a line of two or
    more x values; at most MAX_SERIES lines each, labelled by what tells those apart. The title names
    the backend, and what the lines drawn share that the lines left out do not."""
    others = [p for p in axes.parameters if p not in (swept.column, "backend", *fixed_out)]
    out = []
    for backend in backends_in(cells):
        mine = cells[cells["backend"] == backend]
        groups = [g for _, g in mine.groupby(others, dropna=False, sort=True) if g[swept.column].nunique() > 1]
        if not groups:
            continue
        shown = groups[:MAX_SERIES]
        exclude = (swept.column, "backend", *fixed_out)
        differing_shown = varying(pd.concat(shown), axes, exclude=exclude)
        shared = [n for n in varying(pd.concat(groups), axes, exclude=exclude)
                  if n not in differing_shown and n not in axes.protocol]
        title = backend + (": " + series_label(tuple(shown[0].iloc[0][n] for n in shared), shared) if shared else "")
        out.append((title, labelled(shown, axes, exclude=exclude), len(groups) - len(shown)))
    return out


def labelled(groups, axes, exclude):
    """(label, cells) per line: labels name the parameters that differ between lines, leaving out
    how cells were measured (iterations, seed...) unless only that tells two lines apart."""
    differing = varying(pd.concat(groups), axes, exclude=exclude)
    if not differing:
        return [(workload_label(groups[0].iloc[0]), groups[0])]
    names = [n for n in differing if n not in axes.protocol]
    labels = [series_label(tuple(g.iloc[0][n] for n in names), names) for g in groups]
    if len(set(labels)) < len(labels):
        labels = [series_label(tuple(g.iloc[0][n] for n in differing), differing) for g in groups]
    return list(zip(labels, groups))


def sweep_figure(cells, axes, swept, y, y_lo, y_hi, y_label, *, fixed_out=(), reference=None, why_empty=""):
    """The figure and a sentence on what it holds. Cells need columns y, y_lo, y_hi (error bar ends);
    axes: their database's parameters (analysis/axes.py).

    fixed_out: parameters determined by the swept one (e.g. budget by oversubscription), left
    out of the grouping. reference: (y, label) of a horizontal line. Raises Skip(why_empty) when
    no backend has a line."""
    panels = series(cells.dropna(subset=[y]), axes, swept, fixed_out)
    if not panels:
        raise Skip(why_empty)
    most_lines = max(len(lines) for _, lines, _ in panels)
    legend_below = most_lines > LEGEND_INSIDE
    fig, panel_axes = panel_grid(len(panels), height=3.6 + (0.22 * (most_lines + 1) + 0.4 if legend_below else 0))
    shown = hidden = points = 0
    for ax, (title, lines, left_out) in zip(panel_axes, panels):
        hidden += left_out
        ticks = swept.ticks(pd.concat([g for _, g in lines])[swept.column])
        for i, (label, g) in enumerate(lines):
            g = g.assign(x=swept.positions(g[swept.column], ticks)).sort_values("x")
            err = [(g[y] - g[y_lo]).clip(lower=0), (g[y_hi] - g[y]).clip(lower=0)]
            ax.errorbar(g["x"], g[y], yerr=err, marker="os^vDP*X"[i % 8], markersize=5, capsize=3, linewidth=1.4,
                        color=plt.get_cmap("tab10")(i), label=label)
            shown += 1
            points += len(g)
        if ticks is not None:
            ax.set_xticks(range(len(ticks)), [str(t) for t in ticks])
        if reference is not None:
            ax.axhline(reference[0], color="black", linestyle="--", linewidth=1, label=reference[1])
        ax.set_title(title)
        ax.set_xlabel(swept.label)
        ax.set_ylabel(y_label)
        if swept.order is None and not swept.log and _whole_numbers(pd.concat([g for _, g in lines])[swept.column]):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if swept.log:
            ax.set_xscale("log", base=2)
            values = sorted(pd.concat([g for _, g in lines])[swept.column].unique())
            ax.set_xticks(values, [value_text(v) for v in values])
            ax.xaxis.set_minor_locator(NullLocator())
        if _spans_decades(pd.concat([g for _, g in lines])[y]):
            ax.set_yscale("log")
        if legend_below:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), framealpha=0.85)
        else:
            ax.legend(loc="best", framealpha=0.85)
    fig.tight_layout()
    summary = f"{shown} series, {points} cells, on {len(panels)} backend{'s' if len(panels) > 1 else ''}"
    if hidden:
        summary += f" ({hidden} more series not drawn: at most {MAX_SERIES} per panel stay readable)"
    return fig, summary



def _spans_decades(values):
    """Values so far apart that a linear axis would flatten the small ones."""
    positive = values[values > 0]
    return len(positive) > 0 and positive.max() / positive.min() > 30


def _whole_numbers(values):
    return bool((values.astype(float) % 1 == 0).all())
