"""Slowdown against the driver's ceiling as the budget shrinks: latency ÷ driver bound vs
oversubscription, for the UVM backends (the companion of the oversubscription figure, whose bound
is the link's)."""
from figures.common import Drawn, require_gpu_cells
from figures.oversubscription import driver_slowdown, faster_than_note, full_budget_note
from figures.sweeps import Swept, sweep_figure

NAME = "slowdown_vs_oversubscription_driver"
TITLE = "Slowdown vs oversubscription, against the driver's ceiling"


def render(data):
    require_gpu_cells(data.cells, "device budget to oversubscribe")
    cells = driver_slowdown(data.ok)
    fig, summary, bars = sweep_figure(
        cells, data.db.axes, Swept("oversubscription", "oversubscription (weight bytes ÷ budget bytes)"), "x_driver_bound", "lo",
        "hi", "latency ÷ driver bound", iteration_bars="10th and 90th percentile latency ÷ driver bound",
        fixed_out=("budget",), reference=(1.0, "driver bound"), ratio=True,
        why_empty="no UVM backend (uvm, uvm-prefetch) was measured at two or more budgets in a run whose managed-memory "
                  "probe measured the driver's rates (schema version 4 and later).")
    sources = ", ".join(f"{n} from {what}" for what, n in cells["driver_bound_from"].value_counts().sort_index().items())
    return Drawn(fig, "Median forward latency of the UVM backends divided by the cell's driver bound, against the "
                      f"oversubscription ratio ({summary}). The driver bound is the larger of the time the cell's "
                      "bytes need at its run's ceiling for the operation that brings them in (prefetch, read-mostly "
                      "prefetch or faults) and for the one that evicts them during the forward (migration, or "
                      "dropping the read-mostly copy), and the device backend's median latency on the same workload. "
                      "An operation's ceiling is the run's managed-memory probe rate, or the best rate a cell of the "
                      "run achieved through it where that is higher (the table of driver ceilings above gives both). "
                      f"What set the driver bounds of the {len(cells)} UVM cells that have one: {sources}. 1 means "
                      "the cell runs as fast as the driver lets it; the oversubscription figure measures the same "
                      "cells against the link. " + bars + faster_than_note(cells, "x_driver_bound", "driver bound")
                 + full_budget_note(data.ok, data.db.axes))
