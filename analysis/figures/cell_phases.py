"""Where a sweep's time went: each phase of the cells (process start, CUDA context, weights, warm-ups,
timed and traced iterations, the check, teardown, exit), in seconds per cell, per backend."""
import matplotlib.pyplot as plt

from figures.common import Drawn, Skip, backend_color, title_figure, workload_title

NAME = "cell_phases"
TITLE = "Where the sweep's time went"


def phase_seconds(data):
    """{backend: {phase: mean seconds per cell}} and the phases in the order cells ran them, from the
    cell_phases table; apart from drawing, so tests can check them."""
    if not data.db.has("cell_phases"):
        return {}, []
    rows = data.db.query("SELECT c.backend, p.phase, p.seconds, p.position, p.cell_id"
                         " FROM cell_phases p JOIN cells c USING (cell_id)")
    if rows.empty:
        return {}, []
    order = list(rows.groupby("phase")["position"].min().sort_values().index)
    cells = rows.groupby("backend")["cell_id"].nunique()
    sums = rows.groupby(["backend", "phase"])["seconds"].sum()
    means = {b: {p: sums.get((b, p), 0.0) / cells[b] for p in order} for b in cells.index}
    return means, order


def render(data):
    means, order = phase_seconds(data)
    if not means:
        raise Skip("no cell has its phases stored (cell_phases: schema version 6 on).")
    backends = sorted(means)
    fig, ax = plt.subplots(figsize=(9.0, 0.9 + 0.5 * len(order)))
    height = 0.8 / len(backends)
    for i, backend in enumerate(backends):
        ys = [k + i * height for k in range(len(order))]
        ax.barh(ys, [means[backend][p] for p in order], height=height, color=backend_color(backend), label=backend,
                edgecolor="black", linewidth=0.4)
    ax.set_yticks([k + height * (len(backends) - 1) / 2 for k in range(len(order))])
    ax.set_yticklabels(order)
    ax.invert_yaxis()
    ax.set_xlabel("seconds per cell (mean)")
    ax.legend(loc="lower right", framealpha=0.85)
    phased = data.db.query("SELECT DISTINCT cell_id FROM cell_phases")["cell_id"]
    title_figure(fig, workload_title(data.cells[data.cells["cell_id"].isin(phased)], data.cells, data.db.axes),
                 "bars vary backend (the mean over its cells)")
    fig.tight_layout()
    total = {b: sum(means[b].values()) for b in backends}
    return Drawn(fig, "Each phase of a cell's wall time, the mean over each backend's cells (cell_phases; "
                      "results/README.md says what each phase covers). Per cell in all: "
                      + ", ".join(f"{b} {total[b]:.2f} s" for b in backends) + ".")
