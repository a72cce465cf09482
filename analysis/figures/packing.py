"""Ragged batches padded against packed: per model, lengths draw and whatever else tells the ragged
cells apart, a panel of tokens/s (real tokens) and one of peak memory, a pair of bars per batch. A
setting with no padded cell is left out, the caption counting it."""
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from figures.common import (PALETTE, Drawn, Skip, count_phrase, error_bars_legend, error_bars_text,
                            memory_unit, over_repeats, panel_grid, title_figure, value_text, varying, workload_title)
from figures.throughput import throughput
from figures.training import with_memory

NAME = "packing"
TITLE = "Padded vs packed ragged batches"

PACKINGS = (("padded", PALETTE["grey"]), ("packed", PALETTE["blue"]))
# What a panel's bars are: a pair (padded, packed) per batch.
SWEPT = "batch"
APART = "packing"
# Panels beyond this many pairs are left out (the caption says how many): more cannot be read.
MAX_PANELS = 8
BAR = 0.38


class Panel:
    """The bars of one setting of every parameter but the batch and the packing: its label and one row
    per (batch, packing) (over_repeats rows with tps, tps_lo, tps_hi, memory, repeats and the padded
    cell's padding_share)."""

    def __init__(self, label, bars):
        self.label = label
        self.bars = bars

    def ratio(self, batch, column):
        """packed ÷ padded of `column` at `batch`; None without both bars."""
        at = self.bars[self.bars[SWEPT] == batch].set_index(APART)[column]
        if not {"padded", "packed"} <= set(at.index) or not at["padded"] > 0 or pd.isna(at["packed"]):
            return None
        return at["packed"] / at["padded"]


def ragged_cells(ok):
    """The measured forwards of ragged batches (lengths other than fixed), with tps, tps_lo and tps_hi
    (figures.throughput: over the real tokens) and memory (figures.training.with_memory: a GPU cell's
    NVML peak, a host cell's peak resident set)."""
    if "lengths" not in ok or "real_tokens" not in ok:  # a database from before schema 26
        return ok.iloc[0:0].assign(tps=pd.Series(dtype=float))
    return with_memory(throughput(ok[(ok["lengths"] != "fixed") & ok["real_tokens"].notna() & (ok["mode"] != "train")]))


def panel_key(cells, axes):
    """The parameters whose values make a panel: every workload and placement parameter a matrix sets
    but the batch and the packing, and the seed, which a ragged cell draws its lengths from."""
    return [p for p in (*axes.identity, "seed") if p in axes.parameters and p in cells and p not in (SWEPT, APART)]


def packing_panels(ok, axes):
    """([Panel] in order, panels left out beyond MAX_PANELS, panels left out for having no padded bar,
    the parameters the labels name): the figure's data, apart from drawing so that tests can check it."""
    cells = ragged_cells(ok)
    if cells.empty:
        return [], 0, 0, []
    key = panel_key(cells, axes)
    groups = [group for _, group in cells.groupby(key, dropna=False, sort=True)]
    # A setting measured packed alone (a varlen-overhead sweep sets packed batches against a rectangular
    # one, which is no ragged cell) has no padded bar to set its packed bars against.
    paired = [group for group in groups if (group[APART] == "padded").any()]
    unpaired = len(groups) - len(paired)
    if not paired:
        return [], 0, unpaired, []
    cells = pd.concat(paired)
    named = ["model", "lengths"] + [p for p in varying(cells, axes, exclude=(SWEPT, APART, "model", "lengths"))
                                    if p in key]
    panels = []
    for group in paired:
        first = group.iloc[0]
        label = f"{first['model']}, {first['lengths']}\n" + ", ".join(f"{p} {value_text(first[p])}" for p in named[2:])
        rows = []
        for _, at in group.groupby([SWEPT, APART], sort=True):
            tps = over_repeats(at, APART, "tps", "tps_lo", "tps_hi")
            tps["memory"] = at["memory"].median()
            rows.append(tps)
        panels.append(Panel(label, pd.concat(rows, ignore_index=True)))
    return panels[:MAX_PANELS], max(0, len(panels) - MAX_PANELS), unpaired, named


def draw_bars(ax, panel, column, scale):
    batches = sorted(panel.bars[SWEPT].unique())
    for offset, (packing, color) in zip((-BAR / 2, BAR / 2), PACKINGS):
        mine = panel.bars[panel.bars[APART] == packing].set_index(SWEPT)
        xs = [i + offset for i, b in enumerate(batches) if b in mine.index]
        ys = [mine.loc[b, column] / scale for b in batches if b in mine.index]
        err = None
        if column == "tps":
            err = [[(mine.loc[b, "tps"] - mine.loc[b, "tps_lo"]) / scale for b in batches if b in mine.index],
                   [(mine.loc[b, "tps_hi"] - mine.loc[b, "tps"]) / scale for b in batches if b in mine.index]]
            err = np.clip(np.array(err, dtype=float), 0, None)
        ax.bar(xs, ys, BAR, yerr=err, capsize=3, color=color, edgecolor="black", linewidth=0.4, label=packing)
    for i, b in enumerate(batches):
        ratio = panel.ratio(b, column)
        packed = panel.bars[(panel.bars[SWEPT] == b) & (panel.bars[APART] == "packed")]
        if ratio is not None:
            top = packed[column].iloc[0] if column != "tps" else packed["tps_hi"].iloc[0]
            ax.annotate(f"×{ratio:.2f}", (i + BAR / 2, top / scale), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(batches)), [tick(panel, b) for b in batches])
    ax.set_xlim(-0.6, len(batches) - 0.4)  # a lone pair as wide as any other
    ax.set_xlabel("batch (sequences per forward)")
    ax.set_ylim(0, ax.dataLim.ymax * 1.15 or 1.0)


def tick(panel, batch):
    """"16" and, where the padded cell has it, the share of its rows that was padding."""
    padded = panel.bars[(panel.bars[SWEPT] == batch) & (panel.bars[APART] == "padded")]
    if len(padded) and "padding_share" in padded and pd.notna(padded["padding_share"].iloc[0]):
        return f"{value_text(batch)}\n{100 * padded['padding_share'].iloc[0]:.0f} % padding"
    return value_text(batch)


def memory_label(panel):
    """What a panel's memory is: the GPU's peak for GPU cells, the process's resident set for host cells."""
    backends = set(panel.bars["backend"])
    if backends == {"host"}:
        return "peak host RSS"
    return "peak GPU memory" if "host" not in backends else "peak memory (GPU; host: RSS)"


def render(data):
    panels, left_out, unpaired, named = packing_panels(data.ok, data.db.axes)
    if unpaired and not panels:
        raise Skip(f"every measured ragged batch was run packed alone ({count_phrase(unpaired, 'setting')} with no "
                   "padded cell): the figure sets packed against padded.")
    if not panels:
        raise Skip("the database has no measured forward of a ragged batch (lengths other than \"fixed\", status ok, "
                   "real_tokens stored: schema 26 on).")
    fig, axes = panel_grid(2 * len(panels), width=5.2, height=3.6)
    drawn = pd.concat([p.bars for p in panels])
    shown = ragged_cells(data.ok)
    shown = shown[shown["cell_id"].isin(drawn["cell_id"])]
    title_figure(fig, workload_title(shown, data.cells, data.db.axes, apart=(*named, SWEPT, APART)),
                 f"padded against packed; one row of panels per {', '.join(named)}")
    for panel, tps_ax, mem_ax in zip(panels, axes[0::2], axes[1::2]):
        draw_bars(tps_ax, panel, "tps", 1.0)
        tps_ax.set_title(f"{panel.label}: throughput", fontsize=9)
        tps_ax.set_ylabel("tokens/s (real tokens ÷ median)")
        unit, scale = memory_unit(panel.bars["memory"].max())
        if panel.bars["memory"].notna().any():
            draw_bars(mem_ax, panel, "memory", scale)
        mem_ax.set_title(f"{panel.label}: peak memory", fontsize=9)
        mem_ax.set_ylabel(f"{memory_label(panel)} ({unit})")
    repeats = list(drawn["repeats"])
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))
    handles = [Patch(facecolor=color, edgecolor="black", linewidth=0.4, label=packing) for packing, color in PACKINGS]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, framealpha=0.85,
               title=error_bars_legend(repeats).replace("\n", "; ") + "; ×: packed ÷ padded")
    return Drawn(fig, caption(panels, left_out, unpaired, drawn, repeats))


def caption(panels, left_out, unpaired, drawn, repeats):
    pairs = sum(p.ratio(b, "tps") is not None for p in panels for b in p.bars[SWEPT].unique())
    text = ("Forwards of ragged batches (lengths drawn from a distribution or a file, not \"fixed\"), each batch of "
            "sequences run padded to its longest (every sequence as many rows as the longest, the padding computed) "
            "and packed (the sequences back to back), one row of panels per model, lengths draw and any other "
            f"parameter that differs ({count_phrase(len(panels), 'row')}, {count_phrase(len(drawn), 'bar')}, "
            f"{count_phrase(pairs, 'batch', 'batches')} with both). Left: tokens per second over the real tokens "
            "(tokens_per_s: real_tokens ÷ the median latency; padding rows do not count). Right: the peak memory, the "
            "device's for GPU cells (gpu_peak_bytes: NVML's peak less what was in use before the cell), the process's "
            "resident set for host cells (peak_host_rss_bytes). Under each batch, the share of the padded batch's rows "
            "that was padding (padding_share); above each packed bar, packed ÷ padded. A padded and a packed cell of "
            "one batch hold the same sequences: the lengths each drew from the same seed (cells.drawn_lengths). ")
    text += error_bars_text(repeats, "throughput at the 90th and 10th percentile latency; memory, none (one reading)")
    if unpaired:
        text += (f" {count_phrase(unpaired, 'row')} not drawn for having no padded cell (packed batches measured alone, "
                 "as a varlen-overhead sweep runs them against a rectangular batch of fixed lengths).")
    if left_out:
        text += f" {count_phrase(left_out, 'more row')} not drawn: at most {MAX_PANELS} stay readable."
    return text
