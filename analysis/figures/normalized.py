"""The course report's figure: performance normalized to the baseline variant, grouped by model,
one bar per variant, one panel per processor (GPU, or the CPU for host-backend cells)."""
import matplotlib.pyplot as plt
import numpy as np

from figures.common import Drawn, Skip, count_phrase, panel_grid, ratio_axis, title_figure, workload_title

NAME = "normalized_performance"
TITLE = "Performance normalized to baseline"

# The fusion variants in the order the UM-layerfusion report showed them; others follow by name.
VARIANT_ORDER = ["baseline", "dropout_ln", "attn_ln", "ffn_ln", "attn_proj", "all"]


def processor(cell):
    if cell["backend"] == "host":
        return f"CPU: {cell['cpu_model']}" if cell["cpu_model"] else "CPU"
    return cell["gpu_name"] if cell["gpu_name"] else "GPU (name not recorded)"


def geometric_mean(values):
    return float(np.exp(np.log(values).mean()))


def workload(axes):
    """The columns a variant's cell shares with the baseline cell it is set against: what is computed
    and how it runs, but the variant, and the processor (analysis/axes.py)."""
    return [p for p in axes.identity if p != "variant"] + ["processor"]


def normalized(ok, axes):
    """Per (processor, model, variant): geometric means over workloads of baseline ÷ variant latency,
    the number of workloads, and error bars. A workload's baseline is the median of its baseline
    cells' medians (its repeats). The error bars are the run-to-run spread where a variant was
    measured more than once on a workload (the lowest and highest ratio over its repeats), else the
    spread of the timed iterations (the ratio at the variant's 90th and 10th percentile latency)."""
    cells = ok.assign(processor=ok.apply(processor, axis=1))
    shared = [p for p in workload(axes) if p in cells]  # older files lack the columns of later axes
    base = (cells[cells["variant"] == "baseline"].groupby(shared, dropna=False)["latency_median_ms"].median()
            .rename("baseline_ms").reset_index())
    paired = cells.merge(base, on=shared)
    paired["perf"] = paired["baseline_ms"] / paired["latency_median_ms"]
    paired["perf_p90"] = paired["baseline_ms"] / paired["latency_p90_ms"]
    paired["perf_p10"] = paired["baseline_ms"] / paired["latency_p10_ms"]
    per_workload = (paired.groupby(shared + ["variant"], dropna=False)
                    .agg(perf=("perf", geometric_mean), run_lo=("perf", "min"), run_hi=("perf", "max"),
                         repeats=("perf", "size"), iter_lo=("perf_p90", geometric_mean),
                         iter_hi=("perf_p10", geometric_mean))
                    .reset_index())
    repeated = per_workload["repeats"] > 1
    per_workload["perf_lo"] = per_workload["run_lo"].where(repeated, per_workload["iter_lo"])
    per_workload["perf_hi"] = per_workload["run_hi"].where(repeated, per_workload["iter_hi"])
    return (per_workload.groupby(["processor", "model", "variant"])
            .agg(perf=("perf", geometric_mean), perf_lo=("perf_lo", geometric_mean),
                 perf_hi=("perf_hi", geometric_mean), workloads=("perf", "size"), repeats=("repeats", "max"))
            .reset_index())


def variant_sort_key(v):
    return (VARIANT_ORDER.index(v), "") if v in VARIANT_ORDER else (len(VARIANT_ORDER), v)


def render(data):
    ok = data.ok.dropna(subset=["latency_median_ms", "latency_p10_ms", "latency_p90_ms"])
    if ok.empty:
        raise Skip("no cell has a measured latency (status ok).")
    if not (ok["variant"] == "baseline").any():
        raise Skip("no baseline cell was measured, and performance is normalized to the baseline variant of the "
                   "same workload.")
    table = normalized(ok, data.db.axes)
    if set(table["variant"]) == {"baseline"}:
        raise Skip("only the baseline variant was measured, so every bar would be 1: the figure compares variants "
                   "and needs another one on the same workload (the `variant` axis, e.g. variant = [\"baseline\", "
                   "\"all\"]).")
    processors = sorted(table["processor"].unique())
    fig, axes = panel_grid(len(processors), width=6.0, max_cols=1)
    # One colour per variant across panels.
    colors = {v: plt.get_cmap("tab10")(i) for i, v in enumerate(sorted(table["variant"].unique(), key=variant_sort_key))}
    for ax, proc in zip(axes, processors):
        mine = table[table["processor"] == proc]
        models = sorted(mine["model"].unique())
        variants = sorted(mine["variant"].unique(), key=variant_sort_key)
        width = 0.8 / len(variants)
        for i, variant in enumerate(variants):
            rows = mine[mine["variant"] == variant].set_index("model").reindex(models)
            x = np.arange(len(models)) + (i - (len(variants) - 1) / 2) * width
            err = [(rows["perf"] - rows["perf_lo"]).clip(lower=0), (rows["perf_hi"] - rows["perf"]).clip(lower=0)]
            ax.bar(x, rows["perf"], width, yerr=err, capsize=3, color=colors[variant], label=variant,
                   edgecolor="black", linewidth=0.5)
        ax.axhline(1.0, color="black", linewidth=0.8, label="baseline = 1")
        ax.set_xticks(range(len(models)), models, rotation=20 if len(models) > 4 else 0)
        ax.set_xlabel("model")
        ratio_axis(ax, "performance ÷ baseline")
        ax.set_title(proc)
        ax.legend(title="variant", loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.85)
    title_figure(fig, workload_title(ok, data.cells, data.db.axes, apart=("variant",)),
                 "bars vary variant, grouped by model; one panel per processor")
    fig.tight_layout()
    return Drawn(fig, caption(data.cells, table))


def caption(cells, table):
    workloads = int(table[table["variant"] == "baseline"]["workloads"].sum())
    text = ("Forward performance of each fused-kernel variant relative to the baseline variant on the same workload "
            "(model, backend, dtype, batch, sequence length and every other parameter equal): baseline median latency "
            "÷ the variant's median latency, so higher is faster and baseline = 1. Where a model was measured on "
            "several workloads the bar is their geometric mean "
            f"({count_phrase(workloads, 'baseline workload')} in all). Error bars: ")
    if (table["repeats"] > 1).any():
        text += ("the run-to-run spread, the lowest and highest ratio over a workload's repeats (cells that differ "
                 "only in `repeat`), where a variant was measured more than once; otherwise the ratio at the variant's "
                 "90th and 10th percentile latency (the spread of the timed iterations).")
    else:
        text += ("the same ratio at the variant's 90th and 10th percentile latency (the spread of the timed "
                 "iterations); measure with `repeat = [1, 2, 3]` for run-to-run error bars.")
    unmeasured = cells[(cells["variant"] != "baseline") & (cells["status"] != "ok")]
    if len(unmeasured):
        reasons = "; ".join(sorted(set(unmeasured["reason"].dropna().astype(str)))[:3])
        text += f" Not drawn: {count_phrase(len(unmeasured), 'cell')} of other variants that were not measured ({reasons})."
    return text
