"""Forward latency against the number of copy/prefetch streams, per backend."""
from figures.common import Drawn, require_gpu_cells
from figures.sweeps import Swept, sweep_figure

NAME = "latency_vs_streams"
TITLE = "Latency vs copy/prefetch streams"


def render(data):
    require_gpu_cells(data.cells, "copy or prefetch streams")
    fig, summary, bars = sweep_figure(
        data.ok, data.db.axes, Swept("streams", "copy/prefetch streams"), "latency_median_ms", "latency_p10_ms", "latency_p90_ms",
        "forward latency (ms)", iteration_bars="the 10th to 90th percentile of the iterations",
        why_empty="no backend was measured at two or more stream counts with every other parameter the same.")
    return Drawn(fig, "Median forward latency of the timed iterations against the number of copy/prefetch streams "
                      f"({summary}). {bars} Each line keeps every other parameter fixed and names those that "
                      "differ between lines.")
