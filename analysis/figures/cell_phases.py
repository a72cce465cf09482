"""Where a sweep's time went: each phase of the cells (process start, CUDA context, weights, warm-ups,
timed and traced iterations, the check, teardown, exit), in seconds per cell, per backend; and
apart, the check's host reference forward that one cell of a workload runs for all of its cells."""
import matplotlib.pyplot as plt

from figures.common import Drawn, Skip, backend_color, count_phrase, title_figure, workload_title

NAME = "cell_phases"
TITLE = "Where the sweep's time went"

# The phase of a kept reference forward (results/README.md): a cost of the workload, not of the
# backend of the cell that happened to run it first.
REFERENCE = "reference"
REFERENCE_COLOR = "#bbbbbb"


def phase_rows(db):
    """Every stored phase with its cell's backend. Before schema version 14 the reference forward was
    part of the `check` of the cell that ran it: that cell's check is taken as its reference."""
    kept = "check_reference_computed" in db.columns("cells") \
        and "check_reference_key" in db.columns("cells")
    rows = db.query("SELECT c.backend, p.phase, p.seconds, p.position, p.cell_id"
                    + (", c.check_reference_computed = 1 AND c.check_reference_key IS NOT NULL AS ran_kept"
                       if kept else ", 0 AS ran_kept")
                    + " FROM cell_phases p JOIN cells c USING (cell_id)")
    split = set(rows.loc[rows["phase"] == REFERENCE, "cell_id"])
    older = (rows["phase"] == "check") & (rows["ran_kept"] == 1) & ~rows["cell_id"].isin(split)
    rows.loc[older, "phase"] = REFERENCE
    return rows


def phase_seconds(data):
    """({backend: {phase: mean seconds per cell}}, the phases in the order cells ran them, and the
    reference forwards as {"cells": how many ran one, "seconds": their total}), from the cell_phases
    table; apart from drawing, so tests can check them."""
    if not data.db.has("cell_phases"):
        return {}, [], None
    rows = phase_rows(data.db)
    if rows.empty:
        return {}, [], None
    reference = rows[rows["phase"] == REFERENCE]
    per_cell = rows[rows["phase"] != REFERENCE]
    order = list(per_cell.groupby("phase")["position"].min().sort_values().index)
    cells = rows.groupby("backend")["cell_id"].nunique()
    sums = per_cell.groupby(["backend", "phase"])["seconds"].sum()
    means = {b: {p: sums.get((b, p), 0.0) / cells[b] for p in order} for b in cells.index}
    ran = {"cells": reference["cell_id"].nunique(), "seconds": float(reference["seconds"].sum())} if len(reference) else None
    return means, order, ran


def render(data):
    means, order, reference = phase_seconds(data)
    if not means:
        raise Skip("no cell has its phases stored (cell_phases: schema version 6 on).")
    backends = sorted(means)
    rows = order + ([REFERENCE] if reference else [])
    fig, ax = plt.subplots(figsize=(9.0, 0.9 + 0.5 * len(rows)))
    height = 0.8 / len(backends)
    for i, backend in enumerate(backends):
        ys = [k + i * height for k in range(len(order))]
        ax.barh(ys, [means[backend][p] for p in order], height=height, color=backend_color(backend), label=backend,
                edgecolor="black", linewidth=0.4)
    centre = height * (len(backends) - 1) / 2
    if reference:
        ax.barh(len(order) + centre, reference["seconds"] / reference["cells"], height=0.8, color=REFERENCE_COLOR,
                hatch="//", edgecolor="black", linewidth=0.4, label="reference forward (per workload, any backend)")
    ax.set_yticks([k + centre for k in range(len(rows))])
    ax.set_yticklabels(rows)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per cell (mean)")
    ax.legend(loc="lower right", framealpha=0.85)
    phased = data.db.query("SELECT DISTINCT cell_id FROM cell_phases")["cell_id"]
    title_figure(fig, workload_title(data.cells[data.cells["cell_id"].isin(phased)], data.cells, data.db.axes),
                 "bars vary backend (the mean over its cells)")
    fig.tight_layout()
    total = {b: sum(means[b].values()) for b in backends}
    caption = ("Each phase of a cell's wall time, the mean over each backend's cells (cell_phases; "
               "results/README.md says what each phase covers). Per cell in all: "
               + ", ".join(f"{b} {total[b]:.2f} s" for b in backends) + ".")
    if reference:
        caption += (f" Apart (hatched): the host reference forward of the check, which the database keeps, so that the "
                    f"first cell of a workload runs it and the workload's later cells reuse it; a cost of the workload, "
                    f"not of that cell's backend. Its bar is the mean over the {count_phrase(reference['cells'], 'cell')} "
                    f"that ran one ({reference['seconds']:.2f} s in all), left out of the per-cell means above.")
    return Drawn(fig, caption)
