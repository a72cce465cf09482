"""Forward latency against the prefetch setting (off, jit, look-ahead depth), per backend."""
from figures.common import Drawn, require_gpu_cells
from figures.sweeps import Swept, sweep_figure

NAME = "latency_vs_prefetch"
TITLE = "Latency vs prefetch depth"


def prefetch_order(value):
    """off, then jit, then look-ahead depths in increasing order."""
    if value == "off":
        return (0, 0)
    if value == "jit":
        return (1, 0)
    return (2, int(value))


def render(data):
    require_gpu_cells(data.cells, "prefetching")
    fig, summary, bars = sweep_figure(
        data.ok, data.db.axes, Swept("prefetch", "prefetch (look-ahead depth in layers)", order=prefetch_order), "latency_median_ms",
        "latency_p10_ms", "latency_p90_ms", "forward latency (ms)",
        iteration_bars="the 10th to 90th percentile of the iterations",
        why_empty="no backend was measured at two or more prefetch settings with every other parameter the same.")
    return Drawn(fig, "Median forward latency of the timed iterations against the prefetch setting: off (on demand), "
                      "jit (each layer just before it runs) or a look-ahead depth in layers "
                      f"({summary}). {bars} Each line keeps every other parameter fixed.")
