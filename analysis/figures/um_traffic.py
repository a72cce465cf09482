"""Unified Memory traffic (bytes migrated each way, by cause) and page faults per traced cell."""
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from figures.common import (CAUSE_COLORS, PALETTE, Drawn, Skip, count_phrase, require_gpu_cells, title_figure, value_text, varying,
                            workload_title)

NAME = "um_traffic"
TITLE = "Unified Memory traffic and page faults"

EVENT_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS",
                "CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS")
DIRECTIONS = ((11, "host→device", ""), (12, "device→host", "//"))


def traced_cells(db):
    """cell_id of every cell with recorded events."""
    union = " UNION ".join(f"SELECT DISTINCT cell_id FROM {t}" for t in EVENT_TABLES)
    return set(db.query(union)["cell_id"])


def cause_labels(db):
    if not db.has("ENUM_CUDA_UNIF_MEM_MIGRATION"):
        return {}
    df = db.query("SELECT id, label FROM ENUM_CUDA_UNIF_MEM_MIGRATION")
    return dict(zip(df["id"], df["label"]))


def iterations_per_cell(db, cells, ids):
    """What a cell's event totals are divided by: its traced iterations as stored, else as asked
    (trace_iterations), else 1. cells is indexed by cell_id."""
    traced = db.traced_iterations()
    return {c: traced.get(c) or cells.loc[c, "trace_iterations"] or 1 for c in ids}


def per_cell(db, ids, per_iteration):
    """Bytes per (cell, direction, cause) and GPU/CPU faults per cell, each per traced iteration."""
    migrations = db.query('SELECT cell_id, copyKind, coalesce(migrationCause, 0) AS cause, sum(bytes) AS bytes '
                          "FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12) GROUP BY 1, 2, 3")
    gpu = db.query("SELECT cell_id, sum(numberOfPageFaults) AS n FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS GROUP BY 1")
    cpu = db.query("SELECT cell_id, count(*) AS n FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS GROUP BY 1")
    migrations = migrations[migrations["cell_id"].isin(ids)].copy()
    migrations["bytes"] = migrations["bytes"] / migrations["cell_id"].map(per_iteration)
    faults = {name: [dict(zip(df["cell_id"], df["n"])).get(c, 0) / per_iteration[c] for c in ids]
              for name, df in (("GPU page faults", gpu), ("CPU page faults", cpu))}
    return migrations, faults


def render(data):
    require_gpu_cells(data.cells, "Unified Memory or CUPTI events")
    db = data.db
    if not db.has(*EVENT_TABLES):
        raise Skip("this database has no event tables (it was written before sweetspot recorded CUPTI events).")
    cells = data.cells.set_index("cell_id")
    if "um_profiling" in cells:
        refused = cells[cells["um_profiling"].notna() & (cells["um_profiling"] != "supported")]
    else:
        refused = cells.iloc[0:0]
    ids = sorted(traced_cells(db) - set(refused.index))
    if not ids:
        raise Skip("no cell has recorded events: events come from the traced iterations (trace_iterations > 0) of "
                   "GPU cells run with the cupti collector.")
    per_iteration = iterations_per_cell(db, cells, ids)
    migrations, faults = per_cell(db, ids, per_iteration)
    fig = draw(cells, ids, migrations, faults, cause_labels(db), db.axes)
    return Drawn(fig, caption(ids, migrations, faults, refused, cells))


def byte_scale(max_bytes):
    return (1e9, "GB") if max_bytes >= 1e9 else (1e6, "MB") if max_bytes >= 1e6 else (1e3, "kB")


def draw(cells, ids, migrations, faults, causes, parameters):
    """parameters: the database's axes (analysis/axes.py)."""
    # Without faults, a second panel would be empty: the caption says there were none.
    has_faults = any(any(v) for v in faults.values())
    fig, axes = plt.subplots(2 if has_faults else 1, 1, figsize=(max(8.0, 1.1 * len(ids) + 3), 7.0 if has_faults else 4.2),
                             sharex=True, squeeze=False)
    top, bottom = axes[0][0], axes[-1][0]
    x = np.arange(len(ids))
    totals = migrations.groupby(["cell_id", "copyKind"])["bytes"].sum()
    scale, unit = byte_scale(totals.max() if len(totals) else 0)
    width = 0.38
    drawn_causes = set()
    for d, (kind, direction, hatch) in enumerate(DIRECTIONS):
        bottom_at = np.zeros(len(ids))
        for cause in sorted(migrations["cause"].unique()):
            rows = migrations[(migrations["copyKind"] == kind) & (migrations["cause"] == cause)]
            values = np.array([rows.loc[rows["cell_id"] == c, "bytes"].sum() for c in ids]) / scale
            if not values.any():
                continue
            label = causes.get(cause, f"cause {cause}") if cause not in drawn_causes else None
            drawn_causes.add(cause)
            top.bar(x + (d - 0.5) * width, values, width, bottom=bottom_at, color=CAUSE_COLORS.get(cause, "#333333"),
                    hatch=hatch, edgecolor="black", linewidth=0.5, label=label)
            bottom_at += values
    handles, _ = top.get_legend_handles_labels()
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatch, label=direction)
                for _, direction, hatch in DIRECTIONS]
    top.set_ylabel(f"migrated ({unit} per traced iteration)")
    top.set_title("UM migrations by cause; left bar host→device, right (hatched) device→host")
    top.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.85)
    if has_faults:
        for i, (name, values) in enumerate(faults.items()):
            bottom.bar(x + (i - 0.5) * width, values, width, label=name, color=(PALETTE["dark grey"], PALETTE["reddish purple"])[i],
                       edgecolor="black", linewidth=0.5)
        bottom.set_ylabel("page faults per traced iteration")
        bottom.set_title("Page faults")
        bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.85)
    # Each bar is named by what tells its cell apart from the others drawn.
    shown = cells.loc[ids]
    names = varying(shown, parameters)
    bottom.set_xticks(x, ["\n".join([f"#{c}"] + [value_text(cells.loc[c, n]) for n in names]) for c in ids])
    bottom.set_xlabel(f"cell ({', '.join(['id'] + names)})")
    title_figure(fig, workload_title(shown, cells, parameters, apart=names), "one bar pair per traced cell")
    fig.tight_layout()
    return fig


def caption(ids, migrations, faults, refused, cells):
    text = ("Unified Memory traffic and page faults recorded by CUPTI in each traced cell, per traced iteration: "
            "bytes migrated host→device and device→host (CUPTI_ACTIVITY_KIND_MEMCPY rows with copyKind 11 and 12), "
            "split by migration cause; GPU page faults (the sum of numberOfPageFaults over the fault groups) and CPU "
            f"page faults (one record each). {count_phrase(len(ids), 'cell')}.")
    if migrations.empty:
        text += " No cell migrated managed memory (explicit copies and device-resident weights are not UM traffic)."
    if not any(any(v) for v in faults.values()):
        text += (" No page faults were recorded in these cells, so there is no fault panel (on some platforms CUPTI "
                 "reports migrations but not the faults behind them).")
    if "dropped_records" in cells and (cells.loc[ids, "dropped_records"].fillna(0) > 0).any():
        text += " Some cells dropped CUPTI records (dropped_records > 0): their totals are incomplete."
    if len(refused):
        text += f" Left out: {count_phrase(len(refused), 'cell')} where the platform refused UM profiling."
    return text
