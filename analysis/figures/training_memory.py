"""What a training cell's device memory holds: per measured training cell of a GPU backend, a
stacked bar of its weights, training state, kept activations and scratch, and the CUDA context
and libraries, up to the estimator's predicted peak, beside a bar of the measured peak; one panel
per workload, the cells grouped by setting and in batch order."""
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.transforms import blended_transform_factory

from figures.common import (REPEAT_AXES, Drawn, PALETTE, Skip, count_phrase, memory_unit, title_figure, value_text,
                            workload_title)
from figures.training import measured, training_cells
from figures.training_settings import SWEPT, by_setting, by_workload, named_settings

NAME = "training_memory"
TITLE = "Training memory: predicted breakdown vs measured peak"

# The stored terms of what a cell allocated, in the order they are stacked: the harness's own
# accounting (results/README.md), whose sum the estimator's predicted_alloc_bytes predicts. The
# database keeps the estimator's prediction as that total alone, and the state as one number.
TERMS = (("device_weight_bytes", "weights", PALETTE["blue"]),
         ("training_state_bytes", "training state (gradients, fp32 master weights, AdamW moments)", PALETTE["orange"]),
         ("activation_bytes", "kept activations, scratch and GEMM workspace", PALETTE["bluish green"]))
# The rest of the predicted peak: what the estimator's calibration adds for the CUDA context and the
# libraries (and any difference between its predicted allocations and the terms above).
FIXED = ("fixed_bytes", "CUDA context and libraries: the predicted peak less the above", PALETTE["light grey"])
PREDICTED_PEAK = "predicted_peak_bytes"
PREDICTED_ALLOC = "predicted_alloc_bytes"
PEAK = "gpu_peak_bytes"
PEAK_LABEL = "measured peak (NVML)"
PEAK_COLOR = PALETTE["dark grey"]
# Cells beyond this many in a panel are left out (the caption says how many): more cannot be read.
MAX_CELLS = 30
# The two bars of a cell: the predicted stack above its tick, the measured peak below.
BAR = 0.4


def memory_cells(cells):
    """(the measured training cells of a GPU backend with their terms and NVML peak, with fixed_bytes
    (the predicted peak less the terms; NaN without a predicted peak, 0 where the terms pass it) and
    overrun_bytes (how far they pass it); the number of such cells left out for lack of a term)."""
    train = training_cells(cells)
    columns = [c for c, _, _ in TERMS] + [PEAK, PREDICTED_PEAK]
    if any(c not in train for c in columns):  # a database from before training cells stored them
        return train.iloc[0:0].assign(**{FIXED[0]: pd.Series(dtype=float), "overrun_bytes": pd.Series(dtype=float)}), 0
    train = train[measured(train)].copy()
    for c in columns:
        train[c] = pd.to_numeric(train[c], errors="coerce")
    peaked = train[train[PEAK] > 0]
    train = peaked.dropna(subset=[c for c, _, _ in TERMS])
    rest = train[PREDICTED_PEAK] - sum(train[c] for c, _, _ in TERMS)
    return train.assign(**{FIXED[0]: rest.clip(lower=0), "overrun_bytes": (-rest).clip(lower=0)}), len(peaked) - len(train)


def memory_panels(cells, axes):
    """([(workload label, [(setting label, its cells in batch order)])], cells left out beyond
    MAX_CELLS a panel, cells left out for lack of a term): the bars of each workload with a measured training cell of a GPU backend,
    grouped by setting. Apart from drawing so that tests can check them."""
    bars, without_terms = memory_cells(cells)
    if bars.empty:
        return [], 0, without_terms
    names = named_settings(bars, axes)
    panels, left_out = [], 0
    for label, work in by_workload(bars, axes):
        groups, n = [], 0
        for setting, group in by_setting(work, axes, names):
            order = [c for c in (SWEPT, *REPEAT_AXES, "cell_id") if c in group]
            kept = group.sort_values(order).iloc[:max(0, MAX_CELLS - n)]
            left_out += len(group) - len(kept)
            n += len(kept)
            if len(kept):
                groups.append((setting, kept))
        panels.append((label, groups))
    return panels, left_out, without_terms


def draw_panel(ax, label, groups, scale):
    y, ticks, tick_labels = 0.0, [], []
    to_label = blended_transform_factory(ax.transAxes, ax.transData)
    for setting, group in groups:
        ax.text(1.01, y - 0.1, setting, transform=to_label, fontsize=8, fontweight="bold", va="top")
        repeated = any(p in group and group[p].nunique() > 1 for p in REPEAT_AXES)
        for _, cell in group.iterrows():
            left = 0.0
            for column, name, color in (*TERMS, FIXED):
                if pd.isna(cell[column]):
                    continue
                ax.barh(y - BAR / 2, cell[column] / scale, left=left, height=BAR, color=color, edgecolor="black",
                        linewidth=0.3, label=name)
                left += cell[column] / scale
            ax.barh(y + BAR / 2, cell[PEAK] / scale, height=BAR, color=PEAK_COLOR, edgecolor="black", linewidth=0.3,
                    label=PEAK_LABEL)
            if pd.notna(cell[PREDICTED_PEAK]):
                error = 100 * (cell[PREDICTED_PEAK] - cell[PEAK]) / cell[PEAK]
                ax.annotate(f"{error:+.1f} %", (max(left, cell[PEAK] / scale), y), xytext=(3, 0),
                            textcoords="offset points", fontsize=7, va="center")
            ticks.append(y)
            repeat = "".join(f" {p} {value_text(cell[p])}" for p in REPEAT_AXES if repeated)
            tick_labels.append(f"batch {value_text(cell[SWEPT])}{repeat} (cell {int(cell['cell_id'])})")
            y += 1.0
        y += 0.6
    ax.set_yticks(ticks, tick_labels, fontsize=8)
    ax.set_ylim(y - 0.6, -0.6)
    ax.set_xlim(0, ax.dataLim.xmax * 1.1)
    ax.set_title(label)


def render(data):
    panels, left_out, without_terms = memory_panels(data.cells, data.db.axes)
    if not panels:
        raise Skip("the database has no measured training cell of a GPU backend with its peak device memory and "
                   f"what it allocated (mode = \"train\", status ok, {PEAK}, {', '.join(c for c, _, _ in TERMS)}).")
    drawn = pd.concat([g for _, groups in panels for _, g in groups])
    unit, scale = memory_unit(max(drawn[PEAK].max(), drawn[PREDICTED_PEAK].max(skipna=True) if
                                  drawn[PREDICTED_PEAK].notna().any() else 0))
    heights = [sum(len(g) for _, g in groups) + 0.6 * len(groups) for _, groups in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9.0, 1.3 * len(panels) + 0.34 * sum(heights)), squeeze=False,
                             gridspec_kw=dict(height_ratios=[max(h, 1.0) for h in heights]))
    for ax, (label, groups) in zip(axes[:, 0], panels):
        draw_panel(ax, label, groups, scale)
    axes[-1, 0].set_xlabel(f"device memory ({unit})")
    names = named_settings(drawn, data.db.axes)
    title_figure(fig, workload_title(drawn, data.cells, data.db.axes, apart=(*names, SWEPT)),
                 "per training cell: the predicted peak's parts above, the measured peak below; one panel per workload")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    # One entry per part, in the order they are stacked, then the measured peak.
    by_label = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            by_label.setdefault(label, handle)
    order = [name for _, name, _ in (*TERMS, FIXED)] + [PEAK_LABEL]
    shown = [label for label in order if label in by_label]
    fig.legend([by_label[label] for label in shown], shown, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
               framealpha=0.85)
    return Drawn(fig, caption(drawn, left_out, without_terms, names))


def caption(drawn, left_out, without_terms, names):
    text = ("Each measured training cell of a GPU backend (one panel per workload; grouped by setting: "
            f"{', '.join(names)}; in batch order): above its tick, the device memory the estimator predicted "
            f"({PREDICTED_PEAK}) stacked from the parts the database stores; below, the measured peak ({PEAK}: NVML's "
            "peak of the device, less what was in use before the cell); beside them, the prediction's error "
            f"(predicted − measured) ÷ measured. {count_phrase(len(drawn), 'cell')}. The database stores the "
            f"estimator's prediction as totals ({PREDICTED_ALLOC}, {PREDICTED_PEAK}), not per part, so the parts are "
            "what the cell allocated by the harness's own accounting, which those totals predict: the weights the "
            "backend held on the device (device_weight_bytes), the training state (training_state_bytes: the "
            "gradients, fp32 master weights and AdamW's moments, stored as one number, not apart), the activations "
            "the step keeps for the backward with its scratch (activation_bytes, the GEMM workspace included, not "
            "stored apart), and the rest of the predicted peak: the CUDA context and libraries the estimator's "
            "calibration adds.")
    alloc = drawn.dropna(subset=[PREDICTED_ALLOC]) if PREDICTED_ALLOC in drawn else drawn.iloc[0:0]
    if len(alloc):
        difference = (pd.to_numeric(alloc[PREDICTED_ALLOC]) - sum(alloc[c] for c, _, _ in TERMS)).abs()
        if difference.max() > 0:
            worst = alloc.loc[difference.idxmax()]
            text += (f" The predicted allocations ({PREDICTED_ALLOC}) differ from those parts' sum in "
                     f"{count_phrase(int((difference > 0).sum()), 'cell')} (by up to {difference.max() / 2**20:.1f} MiB, "
                     f"cell {int(worst['cell_id'])}); the last part takes up the difference.")
        else:
            text += f" The predicted allocations ({PREDICTED_ALLOC}) equal those parts' sum in every cell."
    unpredicted = drawn[drawn[PREDICTED_PEAK].isna()]
    if len(unpredicted):
        text += (f" {count_phrase(len(unpredicted), 'cell')} had no predicted peak (no cell of its GPU and driver to "
                 "calibrate on yet): its bar stops at the allocations, with no error.")
    overrun = drawn[drawn["overrun_bytes"] > 0]
    if len(overrun):
        worst = overrun.sort_values("overrun_bytes").iloc[-1]
        text += (f" In {count_phrase(len(overrun), 'cell')} the parts add up to more than the predicted peak (by up to "
                 f"{worst['overrun_bytes'] / 2**20:.1f} MiB, cell {int(worst['cell_id'])}): those bars have no last "
                 "part and end past the prediction.")
    if left_out:
        text += f" {count_phrase(left_out, 'more cell')} not drawn: at most {MAX_CELLS} cells per panel stay readable."
    if without_terms:
        text += (f" {count_phrase(without_terms, 'more cell')} not drawn: one of its parts is not stored "
                 f"(NULL among {', '.join(c for c, _, _ in TERMS)}).")
    return text
