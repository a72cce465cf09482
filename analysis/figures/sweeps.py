"""A measured quantity against one swept parameter: one panel per backend, one line per setting of
the other parameters that was measured at two or more values of the swept one. Repeats of a cell
(REPEAT_AXES) are one point with their spread as error bars, not lines of their own."""
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator, NullLocator

from figures.common import (REPEAT_AXES, Skip, backends_in, error_bars_legend, error_bars_text, over_repeats,
                            panel_grid, panels_and_lines, ratio_axis, series_label, title_figure, value_text, varying,
                            workload_title)

# Lines beyond this many per panel are left out (the caption says how many): a legend longer
# than this cannot be read in print.
MAX_SERIES = 8
# Legends of more rows than this (lines, the reference line, the title's lines) go below their
# panel, which grows to hold them: inside, they would hide the lines themselves.
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
    """(title, [(label, cells of one line)], lines left out, the parameters the labels name) for every
    backend with a line of two or more x values; at most MAX_SERIES lines each, labelled by what tells
    those apart. The title names the backend, and what the lines drawn share that the lines left out
    do not. A line holds the repeats of its cells."""
    others = [p for p in axes.parameters if p not in (swept.column, "backend", *fixed_out, *REPEAT_AXES)]
    out = []
    for backend in backends_in(cells):
        mine = cells[cells["backend"] == backend]
        groups = [g for _, g in mine.groupby(others, dropna=False, sort=True) if g[swept.column].nunique() > 1]
        if not groups:
            continue
        shown = groups[:MAX_SERIES]
        exclude = (swept.column, "backend", *fixed_out, *REPEAT_AXES)
        differing_shown = varying(pd.concat(shown), axes, exclude=exclude)
        shared = [n for n in varying(pd.concat(groups), axes, exclude=exclude)
                  if n not in differing_shown and n not in axes.protocol]
        title = backend + (": " + series_label(tuple(shown[0].iloc[0][n] for n in shared), shared) if shared else "")
        lines, names = labelled(shown, axes, exclude=exclude, lone=backend)
        out.append((title, lines, len(groups) - len(shown), names))
    return out


def labelled(groups, axes, exclude, lone):
    """([(label, cells)] per line, the parameters the labels name): labels name the parameters that
    differ between lines, leaving out how cells were measured (iterations, seed...) unless only that
    tells two lines apart. A lone line is labelled `lone`: the figure's title names its workload."""
    differing = varying(pd.concat(groups), axes, exclude=exclude)
    if not differing:
        return [(lone, groups[0])], []
    names = [n for n in differing if n not in axes.protocol]
    labels = [series_label(tuple(g.iloc[0][n] for n in names), names) for g in groups]
    if len(set(labels)) < len(labels):
        names = differing
        labels = [series_label(tuple(g.iloc[0][n] for n in names), names) for g in groups]
    return list(zip(labels, groups)), names


def sweep_figure(cells, axes, swept, y, y_lo, y_hi, y_label, *, iteration_bars, fixed_out=(), reference=None,
                 ratio=False, why_empty=""):
    """The figure, a phrase on what it holds, and the caption's sentence on its error bars. Cells need
    columns y, y_lo, y_hi (error bar ends of a cell measured once, which `iteration_bars` describes);
    axes: their database's parameters (analysis/axes.py).

    fixed_out: parameters determined by the swept one (e.g. budget by oversubscription), left
    out of the grouping. reference: (y, label) of a horizontal line. ratio: y is a ratio, whose axis
    starts at zero. Raises Skip(why_empty) when no backend has a line."""
    panels = series(cells.dropna(subset=[y]), axes, swept, fixed_out)
    if not panels:
        raise Skip(why_empty)
    drawn = pd.concat([g for _, lines, _, _ in panels for _, g in lines])
    # Each line's points, a point's repeats as one; and each panel's legend title, which says what they are.
    points_of = [[over_repeats(g, swept.column, y, y_lo, y_hi) for _, g in lines] for _, lines, _, _ in panels]
    legend_titles = [error_bars_legend([n for g in lines for n in g["repeats"]]) for lines in points_of]
    most_rows = max(len(lines) + (reference is not None) + title.count("\n") + 1
                    for lines, title in zip(points_of, legend_titles))
    legend_below = most_rows > LEGEND_INSIDE
    fig, panel_axes = panel_grid(len(panels), height=3.6 + (0.22 * (most_rows + 1) + 0.4 if legend_below else 0))
    names = [n for n in axes.parameters if any(n in panel_names for _, _, _, panel_names in panels)]
    title_figure(fig, workload_title(drawn, cells, axes, apart=names), panels_and_lines("backend", names))
    shown = hidden = points = 0
    for ax, (title, lines, left_out, _), line_points, legend_title in zip(panel_axes, panels, points_of, legend_titles):
        hidden += left_out
        ticks = swept.ticks(pd.concat([g for _, g in lines])[swept.column])
        for i, ((label, _), g) in enumerate(zip(lines, line_points)):
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
        if swept.order is None and not swept.log and _whole_numbers(pd.concat([g for _, g in lines])[swept.column]):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if swept.log:
            ax.set_xscale("log", base=2)
            values = sorted(pd.concat([g for _, g in lines])[swept.column].unique())
            ax.set_xticks(values, [value_text(v) for v in values])
            ax.xaxis.set_minor_locator(NullLocator())
        if _spans_decades(pd.concat([g for _, g in lines])[y]):
            ax.set_yscale("log")
        if ratio:
            ratio_axis(ax, y_label)
        else:
            ax.set_ylabel(y_label)
        if legend_below:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), framealpha=0.85, title=legend_title)
        else:
            ax.legend(loc="best", framealpha=0.85, title=legend_title)
    fig.tight_layout()
    summary = (f"{shown} series, {points} points of {len(drawn)} cells, on {len(panels)} "
               f"backend{'s' if len(panels) > 1 else ''}")
    if hidden:
        summary += f" ({hidden} more series not drawn: at most {MAX_SERIES} per panel stay readable)"
    repeats = [n for lines in points_of for g in lines for n in g["repeats"]]
    return fig, summary, error_bars_text(repeats, iteration_bars)


def _spans_decades(values):
    """Values so far apart that a linear axis would flatten the small ones."""
    positive = values[values > 0]
    return len(positive) > 0 and positive.max() / positive.min() > 30


def _whole_numbers(values):
    return bool((values.astype(float) % 1 == 0).all())
