"""What a training cell's device memory holds: per measured training cell of a GPU backend, a
stacked bar of the estimator's predicted peak from its own terms (weights, training state, kept
activations and scratch, GEMM workspace or the prefix check step, and the CUDA context and
libraries) beside a bar of the measured peak split into what the harness accounted the cell
allocated; one panel per workload, the cells grouped by setting and in batch order. Cells of a
database from before the estimator's terms were stored stack the measured accounting instead."""
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.transforms import blended_transform_factory

from figures.common import (REPEAT_AXES, Drawn, PALETTE, Skip, count_phrase, memory_unit, title_figure, value_text,
                            workload_title)
from figures.training import measured, training_cells
from figures.training_settings import SWEPT, by_setting, by_workload, named_settings

NAME = "training_memory"
TITLE = "Training memory: predicted breakdown vs measured peak"

# The parts of the predicted bar, in the order they are stacked: (the column memory_cells fills,
# the legend's label, colour). The measured bar's parts take the colours of the ones they measure.
WEIGHTS = ("weights_part", "weights", PALETTE["blue"])
STATE = ("state_part", "training state (gradients, fp32 master weights, AdamW moments)", PALETTE["orange"])
ACTIVATIONS = ("activations_part", "kept activations and scratch", PALETTE["bluish green"])
WORKSPACE = ("workspace_part", "GEMM workspace", PALETTE["sky blue"])
CHECK_STEP = ("check_step_part", "prefix check step (replaces activations and workspace)",
              PALETTE["reddish purple"])
FIXED = ("fixed_bytes", "CUDA context and libraries: the rest of the predicted peak", PALETTE["light grey"])
PARTS = (WEIGHTS, STATE, ACTIVATIONS, WORKSPACE, CHECK_STEP, FIXED)
# The estimator's terms of predicted_alloc_bytes (schema 18 on), which stack the predicted bar:
# weights + training state + the larger of activations + scores + workspace and the check step.
TERMS = ("predicted_weight_bytes", "predicted_training_state_bytes", "predicted_activation_bytes",
         "predicted_scores_bytes", "predicted_workspace_bytes", "predicted_check_step_bytes")
# The harness's accounting of what the cell allocated (activation_bytes holds its GEMM workspace),
# the parts of the measured bar; the predicted bar's, where the estimator's terms are not stored.
ACCOUNTED = (("device_weight_bytes", WEIGHTS), ("training_state_bytes", STATE), ("activation_bytes", ACTIVATIONS))
MEASURED_REST = ("measured_rest_bytes", "the rest of the measured peak (NVML)", PALETTE["grey"])
FROM_TERMS = "from_terms"
PREDICTED_PEAK = "predicted_peak_bytes"
PREDICTED_ALLOC = "predicted_alloc_bytes"
PEAK = "gpu_peak_bytes"
PEAK_LABEL = "measured peak (NVML)"
PEAK_COLOR = PALETTE["dark grey"]
# Cells beyond this many in a panel are left out (the caption says how many): more cannot be read.
MAX_CELLS = 30
# The two bars of a cell: the predicted stack above its tick, the measured peak below.
BAR = 0.4


def complete(cells, columns):
    """Whether each cell has every one of `columns` (False for all where one is not in the database)."""
    if any(c not in cells for c in columns):
        return pd.Series(False, index=cells.index)
    return cells[list(columns)].notna().all(axis=1)


def memory_cells(cells):
    """(the measured training cells of a GPU backend with an NVML peak and either the estimator's
    terms or the harness's accounting, with the parts of their bars: PARTS' columns (NaN where a
    part is not drawn), FROM_TERMS, overrun_bytes (how far the parts pass the predicted peak) and
    measured_rest_bytes (the measured peak less the accounted parts; NaN where that bar is not
    split); the number of such cells left out for lack of both)."""
    train = training_cells(cells)
    numbers = [c for c, _ in ACCOUNTED] + list(TERMS) + [PEAK, PREDICTED_PEAK, PREDICTED_ALLOC]
    added = [key for key, _, _ in PARTS] + [FROM_TERMS, "overrun_bytes", MEASURED_REST[0]]
    if any(c not in train for c in (PEAK, PREDICTED_PEAK)):  # a database from before training cells stored them
        return train.iloc[0:0].assign(**{c: pd.Series(dtype=float) for c in added}), 0
    train = train[measured(train)].copy()
    for c in numbers:
        if c in train:
            train[c] = pd.to_numeric(train[c], errors="coerce")
    peaked = train[train[PEAK] > 0]
    from_terms, accounted = complete(peaked, TERMS), complete(peaked, [c for c, _ in ACCOUNTED])
    train = peaked[from_terms | accounted].assign(**{FROM_TERMS: from_terms})
    if train.empty:
        return train.assign(**{c: pd.Series(dtype=float) for c in added if c != FROM_TERMS}), len(peaked)
    parts = pd.DataFrame(float("nan"), index=train.index, columns=[key for key, _, _ in PARTS])
    terms = train[train[FROM_TERMS]]
    if len(terms):
        own = terms["predicted_activation_bytes"] + terms["predicted_scores_bytes"] + terms["predicted_workspace_bytes"]
        check = terms["predicted_check_step_bytes"] > own
        parts.loc[terms.index, WEIGHTS[0]] = terms["predicted_weight_bytes"]
        parts.loc[terms.index, STATE[0]] = terms["predicted_training_state_bytes"]
        parts.loc[terms.index, ACTIVATIONS[0]] = (terms["predicted_activation_bytes"]
                                                  + terms["predicted_scores_bytes"]).where(~check)
        parts.loc[terms.index, WORKSPACE[0]] = terms["predicted_workspace_bytes"].where(~check)
        parts.loc[terms.index, CHECK_STEP[0]] = terms["predicted_check_step_bytes"].where(check)
    older = train[~train[FROM_TERMS]]
    for column, (key, _, _) in ACCOUNTED:
        parts.loc[older.index, key] = older[column]
    # The terms add up to predicted_alloc_bytes by the estimator's formula, so the rest is the
    # calibration's CUDA context and libraries; the accounting may differ (the caption says by how much).
    rest = train[PREDICTED_PEAK] - parts.drop(columns=FIXED[0]).sum(axis=1)
    parts[FIXED[0]] = rest.clip(lower=0)
    measured_rest = train[PEAK] - sum(train[c] for c, _ in ACCOUNTED).where(train[FROM_TERMS] & accounted[train.index])
    return (pd.concat([train, parts], axis=1).assign(overrun_bytes=(-rest).clip(lower=0),
                                                     **{MEASURED_REST[0]: measured_rest.where(measured_rest >= 0)}),
            len(peaked) - len(train))


def memory_panels(cells, axes):
    """([(workload label, [(setting label, its cells in batch order)])], cells left out beyond
    MAX_CELLS a panel, cells left out for lack of a part): the bars of each workload with a measured
    training cell of a GPU backend, grouped by setting. Apart from drawing so that tests can check them."""
    bars, without_parts = memory_cells(cells)
    if bars.empty:
        return [], 0, without_parts
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
    return panels, left_out, without_parts


def stack(ax, y, parts, scale):
    """Draws `parts` ([(bytes, label, colour)]) as one bar at `y`, leaving out the empty ones; returns its end."""
    left = 0.0
    for width, label, color in parts:
        if pd.isna(width) or width == 0:
            continue
        ax.barh(y, width / scale, left=left, height=BAR, color=color, edgecolor="black", linewidth=0.3, label=label)
        left += width / scale
    return left


def measured_parts(cell):
    """The measured bar: the accounted parts and the rest where it is split, else the peak alone."""
    if pd.isna(cell[MEASURED_REST[0]]):
        return [(cell[PEAK], PEAK_LABEL, PEAK_COLOR)]
    return [(cell[column], label, color) for column, (_, label, color) in ACCOUNTED] + [
        (cell[MEASURED_REST[0]], *MEASURED_REST[1:])]


def draw_panel(ax, label, groups, scale):
    y, ticks, tick_labels = 0.0, [], []
    to_label = blended_transform_factory(ax.transAxes, ax.transData)
    for setting, group in groups:
        ax.text(1.01, y - 0.1, setting, transform=to_label, fontsize=8, fontweight="bold", va="top")
        repeated = any(p in group and group[p].nunique() > 1 for p in REPEAT_AXES)
        for _, cell in group.iterrows():
            predicted_end = stack(ax, y - BAR / 2, [(cell[key], name, color) for key, name, color in PARTS], scale)
            measured_end = stack(ax, y + BAR / 2, measured_parts(cell), scale)
            if pd.notna(cell[PREDICTED_PEAK]):
                error = 100 * (cell[PREDICTED_PEAK] - cell[PEAK]) / cell[PEAK]
                ax.annotate(f"{error:+.1f} %", (max(predicted_end, measured_end), y), xytext=(3, 0),
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
    panels, left_out, without_parts = memory_panels(data.cells, data.db.axes)
    if not panels:
        raise Skip("the database has no measured training cell of a GPU backend with its peak device memory and "
                   f"the parts of its memory (mode = \"train\", status ok, {PEAK}, and either the estimator's terms "
                   f"{', '.join(TERMS)} or {', '.join(c for c, _ in ACCOUNTED)}).")
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
                 "per training cell: the predicted peak's parts above, the measured peak's below; one panel per workload")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    # One entry per part, in the order they are stacked, then the measured bar's own.
    by_label = {}
    for ax in axes[:, 0]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            by_label.setdefault(label, handle)
    order = [name for _, name, _ in PARTS] + [MEASURED_REST[1], PEAK_LABEL]
    shown = [label for label in order if label in by_label]
    fig.legend([by_label[label] for label in shown], shown, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2,
               framealpha=0.85)
    return Drawn(fig, caption(drawn, left_out, without_parts, names))


def share(cells, of):
    """"every cell" where `cells` are all `of`, else "3 cells"."""
    return "every cell" if len(cells) == len(of) else count_phrase(len(cells), "cell")


def caption(drawn, left_out, without_parts, names):
    text = ("Each measured training cell of a GPU backend (one panel per workload; grouped by setting: "
            f"{', '.join(names)}; in batch order): above its tick, the device memory the estimator predicted "
            f"({PREDICTED_PEAK}) stacked from its parts; below, the measured peak ({PEAK}: NVML's peak of the device, "
            "less what was in use before the cell); beside them, the prediction's error (predicted − measured) ÷ "
            f"measured. {count_phrase(len(drawn), 'cell')}.")
    terms, older = drawn[drawn[FROM_TERMS]], drawn[~drawn[FROM_TERMS]]
    if len(terms):
        text += (f" In {share(terms, drawn)} the parts above are the estimator's own terms: the weights "
                 "(predicted_weight_bytes), the training state (predicted_training_state_bytes: gradients, fp32 master "
                 "weights, AdamW's moments), the kept activations and scratch (predicted_activation_bytes + "
                 "predicted_scores_bytes), the GEMM workspace (predicted_workspace_bytes), and the rest of the "
                 f"predicted peak ({PREDICTED_PEAK} − {PREDICTED_ALLOC}): the CUDA context and libraries its "
                 "calibration adds. The bar below stacks, in the same colours, what the harness accounted the cell "
                 "allocated (device_weight_bytes, training_state_bytes, activation_bytes, whose green holds the GEMM "
                 "workspace too), then the rest of the measured peak in grey.")
        check = terms[terms[CHECK_STEP[0]].notna()]
        if len(check):
            text += (f" In {count_phrase(len(check), 'cell')} the prefix check step (predicted_check_step_bytes, freed "
                     "before the cell's own step) needs more than the activations, scores and workspace together, so "
                     f"it takes their place, as in {PREDICTED_ALLOC}; the measured peak holds it in its grey rest.")
        unsplit = terms[terms[MEASURED_REST[0]].isna()]
        if len(unsplit):
            text += (f" {count_phrase(len(unsplit), 'cell')}'s measured bar is not split: a part of the harness's "
                     "accounting is not stored, or they add up to more than the measured peak.")
    if len(older):
        one = len(older) == 1 or len(older) == len(drawn)
        text += (f" {share(older, drawn).capitalize()} {'has' if one else 'have'} the estimator's prediction as "
                 f"totals only ({PREDICTED_ALLOC}, {PREDICTED_PEAK}), not its terms (stored from schema 18 on), so "
                 "the parts above are what the harness accounted the cell allocated, which those totals "
                 "predict: device_weight_bytes, training_state_bytes and activation_bytes (with the GEMM workspace), "
                 "then the rest of the predicted peak; the bar below is the measured peak alone.")
        alloc = older.dropna(subset=[PREDICTED_ALLOC]) if PREDICTED_ALLOC in older else older.iloc[0:0]
        if len(alloc):
            difference = (alloc[PREDICTED_ALLOC] - sum(alloc[c] for c, _ in ACCOUNTED)).abs()
            if difference.max() > 0:
                worst = alloc.loc[difference.idxmax()]
                text += (f" Their predicted allocations ({PREDICTED_ALLOC}) differ from those parts' sum in "
                         f"{count_phrase(int((difference > 0).sum()), 'cell')} (by up to "
                         f"{difference.max() / 2**20:.1f} MiB, cell {int(worst['cell_id'])}); the last part takes up "
                         "the difference.")
            else:
                text += f" Their predicted allocations ({PREDICTED_ALLOC}) equal those parts' sum in every cell."
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
    if without_parts:
        text += (f" {count_phrase(without_parts, 'more cell')} not drawn: neither the estimator's terms nor the "
                 "harness's accounting of its memory is stored in full.")
    return text
