"""The bound of a cell, shared by the report and scripts/bench/backends_table.py.

    bound = max(streamed_bytes / measured pinned H2D bandwidth, `device` latency of the same workload)

streamed_bytes are the weights the backend could not keep resident under the cell's budget; the
`device` cell of the same workload is the in-memory speed reference. Either term may be missing
(no link probe, no `device` cell); the bound is then the other one, or None.
Cells are mappings by column name (sqlite3.Row, dict, pandas row); NULL may arrive as None or NaN.
Standard library only, so the bench scripts can use it without pandas.
"""
import math


def present(value):
    """None for SQL NULL, whether it came as None or as pandas' NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def workload(cell):
    """What a `device` cell must share with a cell to be its reference."""
    return (cell["model"], cell["dtype"], cell["batch"], cell["seq"], cell["variant"], cell["tf32"])


def device_latencies(cells):
    """Median latency of the `device` cell of each workload."""
    return {workload(c): c["latency_median_ms"] for c in cells if c["backend"] == "device"}


def link_ms(cell):
    """Time the cell's streamed weights need on the measured pinned host→device link (ms)."""
    streamed, gbps = present(cell["streamed_bytes"]), present(cell["h2d_gbps"])
    if not gbps or streamed is None:
        return None
    return streamed / (gbps * 1e6)


def bound_ms(cell, device_ms):
    """The cell's bound (ms), or None when neither term is known."""
    parts = [v for v in (link_ms(cell), present(device_ms.get(workload(cell)))) if v is not None]
    return max(parts) if parts else None
