"""Slowdown against the bound as the budget shrinks: latency ÷ bound vs oversubscription, per backend."""
from bound import BEATEN_BELOW, present
from figures.common import Drawn, require_gpu_cells
from figures.sweeps import Swept, sweep_figure

NAME = "slowdown_vs_oversubscription"
TITLE = "Slowdown vs oversubscription"

# The in-memory reference and the CPU forward are not streamed, so they have no budget to sweep.
NOT_STREAMED = ("device", "host")
# How close (in %) uvm's latency with all weights inside the budget must be to its latency under a
# smaller budget for the caption to explain why it is no faster.
ALIKE_PCT = 25.0


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


def faster_than_note(cells, ratio, bound):
    """A caption sentence naming the cells faster than their bound (`ratio` column below 1); "" if none."""
    beaten = cells[cells[ratio] < BEATEN_BELOW].sort_values("cell_id")
    if beaten.empty:
        return ""
    listed = ", ".join(f"cell {int(c['cell_id'])} ({c['backend']}, {c['budget']}: {c[ratio]:.2f} ×)"
                       for _, c in beaten.iterrows())
    return (f" Faster than their {bound}, which a floor must not allow (look into the bound or the measurement): "
            f"{listed}.")


def per_iteration_htod(cell):
    """(bytes brought host→device per forward, where the number comes from): the UM counters of the
    traced iterations per iteration where recorded, else the backend's streamed bytes."""
    htod, traced = present(cell.get("um_htod_bytes")), present(cell.get("trace_iterations"))
    if htod is not None and traced:
        return htod / traced, "UM counters, traced iteration"
    return cell["streamed_bytes"], "the backend's count"


def full_budget_note(ok, axes):
    """Why `uvm` with every weight inside its budget is about as slow as under a smaller one: it
    starts every iteration with the weights on the host (the backend migrates them back between
    forwards, so each forward faults the same bytes in). A caption sentence per uvm setting measured
    at a budget that holds the weights and at a smaller one, from their latencies and host→device
    bytes, where the two are within ALIKE_PCT; "" when there is none."""
    uvm = ok[(ok["backend"] == "uvm") & ok["oversubscription"].notna()]
    setting = [c for c in axes.identity if c != "budget" and c in uvm]
    notes = []
    for _, group in uvm.groupby(setting, dropna=False, sort=False):
        full = group[group["oversubscription"] <= 1.0]
        smaller = group[group["oversubscription"] > 1.0].sort_values("oversubscription")
        if full.empty or smaller.empty:
            continue
        f, s = full.iloc[0], smaller.iloc[0]
        (f_bytes, source), (s_bytes, _) = per_iteration_htod(f), per_iteration_htod(s)
        change = 100.0 * (f["latency_median_ms"] / s["latency_median_ms"] - 1.0)
        if abs(change) > ALIKE_PCT:
            continue
        notes.append(
            f" uvm at budget {f['budget']} (cell {int(f['cell_id'])}, {f['latency_median_ms']:.4g} ms) is within "
            f"{abs(change):.0f} % of uvm at {s['budget']} (cell {int(s['cell_id'])}, {s['latency_median_ms']:.4g} ms) "
            f"though its weights fit: they start on the host every iteration, so at {f['budget']} it moved "
            f"{f_bytes / 1e9:.2f} GB of its {f['weight_bytes'] / 1e9:.2f} GB of weights host→device per iteration "
            f"({source}), as {s_bytes / 1e9:.2f} GB at {s['budget']}.")
    return "".join(notes)


def render(data):
    require_gpu_cells(data.cells, "device budget to oversubscribe")
    cells = slowdown(data.ok)
    fig, summary, bars = sweep_figure(
        cells, data.db.axes, Swept("oversubscription", "oversubscription (weight bytes ÷ budget bytes)"), "x_bound", "lo", "hi",
        "latency ÷ bound", iteration_bars="10th and 90th percentile latency ÷ bound", fixed_out=("budget",),
        reference=(1.0, "bound"), ratio=True,
        why_empty="no streaming GPU backend (explicit-copy, uvm, uvm-prefetch) was measured at two or more budgets "
                  "with a known bound (a link probe or a device cell of the same workload).")
    return Drawn(fig, "Median forward latency divided by the cell's bound, against the oversubscription ratio "
                      f"({summary}). The bound is the larger of the streamed weight bytes ÷ the pinned host→device "
                      "bandwidth measured at the start of the run, and the median latency of the device backend on "
                      "the same workload; 1 means the cell runs at the bound. " + bars
                 + faster_than_note(cells, "x_bound", "bound")
                 + full_budget_note(data.ok, data.db.axes))
