"""Slowdown against the bound as the budget shrinks: latency ÷ bound vs oversubscription, per backend."""
from figures.common import Drawn, require_gpu_cells
from figures.sweeps import Swept, sweep_figure

NAME = "slowdown_vs_oversubscription"
TITLE = "Slowdown vs oversubscription"

# The in-memory reference and the CPU forward are not streamed, so they have no budget to sweep.
NOT_STREAMED = ("device", "host")


def slowdown(ok):
    """The points: streamed GPU cells with a known bound, with x_bound (median ÷ bound) and the error
    bar ends lo and hi (10th and 90th percentile ÷ bound). Apart from drawing, so tests can check them."""
    cells = ok[~ok["backend"].isin(NOT_STREAMED)].dropna(subset=["bound_ms"]).copy()
    cells["lo"] = cells["latency_p10_ms"] / cells["bound_ms"]
    cells["hi"] = cells["latency_p90_ms"] / cells["bound_ms"]
    return cells


def driver_slowdown(ok):
    """The UVM cells with a driver bound: x_driver_bound (median ÷ driver bound), lo and hi as above."""
    if "driver_bound_ms" not in ok:
        return ok.iloc[0:0]
    cells = ok[~ok["backend"].isin(NOT_STREAMED)].dropna(subset=["driver_bound_ms"]).copy()
    cells["lo"] = cells["latency_p10_ms"] / cells["driver_bound_ms"]
    cells["hi"] = cells["latency_p90_ms"] / cells["driver_bound_ms"]
    return cells


def render(data):
    require_gpu_cells(data.cells, "device budget to oversubscribe")
    cells = slowdown(data.ok)
    fig, summary = sweep_figure(
        cells, data.db.axes, Swept("oversubscription", "oversubscription (weight bytes ÷ budget bytes)"), "x_bound", "lo", "hi",
        "latency ÷ bound", fixed_out=("budget",), reference=(1.0, "bound"),
        why_empty="no streaming GPU backend (explicit-copy, uvm, uvm-prefetch) was measured at two or more budgets "
                  "with a known bound (a link probe or a device cell of the same workload).")
    return Drawn(fig, "Median forward latency divided by the cell's bound, against the oversubscription ratio "
                      f"({summary}). The bound is the larger of the streamed weight bytes ÷ the pinned host→device "
                      "bandwidth measured at the start of the run, and the median latency of the device backend on "
                      "the same workload; 1 means the cell runs at the bound. Error bars: 10th and 90th percentile "
                      "latency ÷ bound.")
