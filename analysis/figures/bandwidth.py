"""Achieved weight-streaming bandwidth per cell against the pinned host→device bandwidth measured at
the start of the run (the PCIe bound)."""
import matplotlib.pyplot as plt

from figures.common import Drawn, Skip, backend_color, backends_in, require_gpu_cells, title_figure, workload_title

NAME = "link_bandwidth"
TITLE = "Achieved weight bandwidth vs the measured link"


def points(ok):
    """The GPU cells that streamed weights, with streamed_gb (x), achieved and attainable GB/s (y, at the
    median latency and at the bound). Apart from drawing, so tests can check them."""
    cells = ok[(ok["backend"] != "host") & (ok["streamed_bytes"].fillna(0) > 0)]
    cells = cells.dropna(subset=["latency_median_ms"])
    driver_bound = cells["driver_bound_ms"] if "driver_bound_ms" in cells else float("nan")
    return cells.assign(streamed_gb=cells["streamed_bytes"] / 1e9,
                        achieved=cells["streamed_bytes"] / (cells["latency_median_ms"] * 1e6),
                        attainable=cells["streamed_bytes"] / (cells["bound_ms"] * 1e6),
                        attainable_driver=cells["streamed_bytes"] / (driver_bound * 1e6))


def render(data):
    require_gpu_cells(data.cells, "host link that weights stream over")
    cells = points(data.ok)
    if cells.empty:
        raise Skip("no measured cell streamed weights over the host link (streamed_bytes > 0): only the "
                   "explicit-copy, uvm and uvm-prefetch backends under a budget do.")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for backend in backends_in(cells):
        mine = cells[cells["backend"] == backend]
        ax.scatter(mine["streamed_gb"], mine["achieved"], color=backend_color(backend), s=30, label=backend,
                   edgecolor="black", linewidth=0.4, zorder=3)
        ax.scatter(mine["streamed_gb"], mine["attainable"], facecolor="none", edgecolor=backend_color(backend), s=40,
                   marker="D", zorder=2)
        ax.scatter(mine["streamed_gb"], mine["attainable_driver"], facecolor="none", edgecolor=backend_color(backend),
                   s=40, marker="^", zorder=2)
    ax.scatter([], [], facecolor="none", edgecolor="black", marker="D", label="at the bound (attainable)")
    if cells["attainable_driver"].notna().any():
        ax.scatter([], [], facecolor="none", edgecolor="black", marker="^", label="at the driver bound (UVM)")
    links = data.runs.dropna(subset=["h2d_gbps"]) if "h2d_gbps" in data.runs else data.runs.iloc[0:0]
    for i, run in enumerate(links.drop_duplicates(subset=["gpu_name", "h2d_gbps"]).itertuples()):
        ax.axhline(run.h2d_gbps, color="black", linestyle=("--", ":", "-.")[i % 3], linewidth=1,
                   label=f"pinned H2D measured: {run.h2d_gbps:.1f} GB/s ({run.gpu_name or 'GPU'})")
    ax.set_xlabel("weights streamed per forward (GB)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, framealpha=0.85)
    title_figure(fig, workload_title(cells, data.ok, data.db.axes), "one point per cell, coloured by backend")
    fig.tight_layout()
    return Drawn(fig, caption(cells, links))


def caption(cells, links):
    text = ("Weight bytes each cell streams over the host link per forward, divided by its median forward latency "
            "(filled markers), against the pinned host→device bandwidth measured at the start of its run (horizontal "
            "lines). Hollow diamonds: the bandwidth the cell would achieve at its bound (streamed bytes ÷ the larger "
            "of the link time and the device backend's latency on the same workload), below the link where "
            f"computing is the limit. {len(cells)} cells.")
    drivers = cells["attainable_driver"].notna().sum()
    if drivers:
        text += (f" Hollow triangles ({drivers} UVM cells): the bandwidth at the driver bound, the bytes the cell "
                 "brings in and evicts at its run's ceiling for each (the managed-memory probe's rate, or the best "
                 "rate a cell of the run achieved where higher), the slower of the two.")
    if links.empty:
        text += " No run of this database measured the link, so there is no link line and no link term in the bound."
    return text
