"""Forward throughput (tokens/s) against the batch size, per backend: the one sweep every backend
has. Training cells have a figure of their own (training.py)."""
from figures.common import Drawn
from figures.sweeps import Swept, sweep_figure

NAME = "throughput_vs_batch"
TITLE = "Throughput vs batch size"


def throughput(ok):
    """The measured cells with tps (tokens/s at the median latency: batch × seq, a ragged batch's real
    tokens) and its error bar ends tps_lo and tps_hi. Apart from drawing, so tests can check them."""
    cells = ok.dropna(subset=["latency_median_ms"]).copy()
    tokens = cells["batch"] * cells["seq"] * 1e3
    if "lengths" in cells:  # schema 26 on: a ragged batch's padding rows are no throughput
        tokens = tokens.where(cells["lengths"] == "fixed", cells["real_tokens"] * 1e3)
    cells["tps"] = tokens / cells["latency_median_ms"]
    # The slow end of the latency spread is the low end of throughput.
    cells["tps_lo"] = tokens / cells["latency_p90_ms"]
    cells["tps_hi"] = tokens / cells["latency_p10_ms"]
    return cells


def render(data):
    cells = throughput(data.ok[data.ok["mode"] != "train"])
    fig, summary, bars = sweep_figure(
        cells, data.db.axes, Swept("batch", "batch size (sequences per forward)", log=True), "tps", "tps_lo", "tps_hi",
        "throughput (tokens/s)", iteration_bars="throughput at the 90th and 10th percentile latency",
        why_empty="no model's forward (mode = \"infer\") was measured at two or more batch sizes with every other "
                  "parameter the same.")
    return Drawn(fig, "Tokens per second (batch × sequence length, or a ragged batch's real tokens, ÷ median forward "
                      "latency) against the batch size "
                      f"({summary}). {bars}")
