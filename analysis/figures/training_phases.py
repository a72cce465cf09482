"""Where a training step's time goes: per measured training cell, a stacked bar of its forward,
backward and optimizer phases (the median of each over the timed steps) and the rest of the
step's median, grouped by workload; one panel per model, each on its own scale."""
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.transforms import blended_transform_factory

from figures.common import REPEAT_AXES, Drawn, PALETTE, Skip, count_phrase, title_figure, value_text, workload_title
from figures.training import measured, training_cells

NAME = "training_step_phases"
TITLE = "Where a training step's time goes"

# The timed phases of a step (results/README.md), in the order a step runs them, and their colours.
PHASES = (("forward_ms", "forward (with the loss)", PALETTE["blue"]),
          ("backward_ms", "backward", PALETTE["orange"]),
          ("optimizer_ms", "optimizer (clipping, AdamW)", PALETTE["bluish green"]))
OTHER = ("other_ms", "other (the step's median less its phases')", PALETTE["light grey"])
TICK = "the step's median"
# Bars beyond this many in a panel are left out (the caption says how many): more cannot be read.
MAX_BARS = 48


def phase_bars(ok_train):
    """The measured training cells with their phases and other_ms, the step's median less the sum of
    the phases' medians. Each phase is the median over the steps on its own, so the sum of those
    medians can exceed the step's median: other_ms is then 0 and overrun_ms says by how much. A
    bar (its phases and other_ms) is thus the step's median wherever overrun_ms is 0. Apart from
    drawing, so tests can check them."""
    phases = [c for c, _, _ in PHASES]
    if any(c not in ok_train for c in phases):  # a database from before schema 16
        return ok_train.iloc[0:0].assign(**{OTHER[0]: pd.Series(dtype=float), "overrun_ms": pd.Series(dtype=float)})
    cells = ok_train.dropna(subset=phases).copy()
    rest = cells["latency_median_ms"] - sum(cells[c] for c, _, _ in PHASES)
    cells[OTHER[0]] = rest.clip(lower=0)
    cells["overrun_ms"] = (-rest).clip(lower=0)
    return cells


def workload_groups(cells, axes):
    """{model: [(a group's label, its cells in bar order)]}: a group holds the cells of one workload
    but the batch (of any placement), in order of batch, backend and repeat; its label names the
    workload parameters that differ between groups."""
    key = [p for p in axes.workload if p in axes.parameters and p not in ("model", "batch") and p in cells]
    named = [p for p in key if cells[p].astype(str).nunique() > 1]
    out = {}
    for model, mine in cells.groupby("model", sort=True):
        groups = []
        for values, group in mine.groupby(key, dropna=False, sort=True):
            values = values if isinstance(values, tuple) else (values,)
            label = ", ".join(f"{p} {value_text(v)}" for p, v in zip(key, values) if p in named) or str(model)
            order = [c for c in ("batch", "backend", *REPEAT_AXES, "cell_id") if c in group]
            groups.append((label, group.sort_values(order)))
        out[model] = groups
    return out


def bar_label(cell, group, panel, axes):
    """What tells a bar apart: its batch, how it ran (backend and any other placement parameter that
    differs among the bars of its panel) and its repeat where its group has several."""
    placement = [p for p in axes.identity if p not in axes.workload and p in axes.parameters]
    parts = [f"batch {value_text(cell['batch'])}"]
    parts += [str(cell[p]) if p == "backend" else f"{p} {value_text(cell[p])}"
              for p in placement if panel[p].astype(str).nunique() > 1]
    parts += [f"{p} {value_text(cell[p])}" for p in REPEAT_AXES if p in group and group[p].nunique() > 1]
    return " ".join(parts) + f" (cell {int(cell['cell_id'])})"


def render(data):
    train = training_cells(data.ok)
    cells = phase_bars(train[measured(train)])
    if cells.empty:
        raise Skip("the database has no measured training cell (mode = \"train\", status ok) with its phases "
                   "stored (forward_ms, backward_ms, optimizer_ms: schema version 16 on).")
    models = workload_groups(cells, data.db.axes)
    rows, left_out = {}, 0
    for model, groups in models.items():
        kept, n = [], 0
        for label, group in groups:
            if n + len(group) > MAX_BARS:
                left_out += len(group)
                continue
            kept.append((label, group))
            n += len(group)
        rows[model] = kept
    heights = [sum(len(g) for _, g in groups) + 0.6 * len(groups) for groups in rows.values()]
    fig, axes = plt.subplots(len(rows), 1, figsize=(9.0, 1.2 * len(rows) + 0.24 * sum(heights)), squeeze=False,
                             gridspec_kw=dict(height_ratios=[max(h, 1.0) for h in heights]))
    for ax, (model, groups) in zip(axes[:, 0], rows.items()):
        draw_panel(ax, model, groups, data.db.axes)
    drawn = pd.concat([g for groups in rows.values() for _, g in groups])
    title_figure(fig, workload_title(drawn, data.cells, data.db.axes, apart=("model", "batch")),
                 "one stacked bar per training cell, grouped by workload; one panel per model")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    # The phases in the order a step runs them, then the tick.
    order = sorted(range(len(labels)), key=lambda i: labels[i] == TICK)
    fig.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, framealpha=0.85)
    return Drawn(fig, caption(drawn, left_out))


def draw_panel(ax, model, groups, axes):
    y, ticks, labels = 0.0, [], []
    panel = pd.concat([g for _, g in groups])
    to_label = blended_transform_factory(ax.transAxes, ax.transData)
    for label, group in groups:
        ax.text(1.01, y - 0.1, label, transform=to_label, fontsize=8, fontweight="bold", va="top")
        for _, cell in group.iterrows():
            left = 0.0
            for column, name, color in (*PHASES, OTHER):
                ax.barh(y, cell[column], left=left, height=0.8, color=color, edgecolor="black", linewidth=0.3,
                        label=name if not ticks else None)
                left += cell[column]
            # The step's median, which a bar overruns where its phases' medians add up to more.
            ax.plot([cell["latency_median_ms"]] * 2, [y - 0.45, y + 0.45], color="black", linewidth=1.2,
                    label=TICK if not ticks else None)
            ticks.append(y)
            labels.append(bar_label(cell, group, panel, axes))
            y += 1.0
        y += 0.6
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(y - 0.6, -0.6)
    ax.set_xlim(0, ax.dataLim.xmax * 1.03)
    ax.set_title(model)
    ax.set_xlabel("ms per step (median of each phase over the timed steps)")


def caption(drawn, left_out):
    overrun = drawn[drawn["overrun_ms"] > 0]
    text = ("Each measured training cell's step split into its phases, each the median over the timed steps "
            "(forward_ms: the forward with the loss fused into the classifier; backward_ms: every gradient and the "
            "global gradient norm; optimizer_ms: the clipping and AdamW), and other: the step's median "
            "(latency_median_ms, the black tick) less the three. Bars are grouped by workload (the parameters the "
            "group names; batch, backend and repeat apart), one panel per model on its own scale. "
            f"{count_phrase(len(drawn), 'cell')}.")
    if len(overrun):
        worst = overrun.sort_values("overrun_ms").iloc[-1]
        text += (f" Each phase's median is taken on its own, so in {count_phrase(len(overrun), 'cell')} they add up "
                 f"to more than the step's median (by up to {worst['overrun_ms']:.3g} ms, cell "
                 f"{int(worst['cell_id'])}): those bars have no other and reach past their tick.")
    if left_out:
        text += (f" {count_phrase(left_out, 'more cell')} not drawn: at most {MAX_BARS} bars per panel stay "
                 "readable.")
    return text
