"""The bounds of a cell, shared by the report and scripts/bench/backends_table.py.

    bound        = max(streamed_bytes / measured pinned H2D bandwidth, `device` latency of the same workload)
    driver bound = max(streamed_bytes / the rate the driver delivers for bringing weights in
                       + streamed_bytes / the rate it delivers for evicting them,
                       `device` latency of the same workload)          (uvm and uvm-prefetch cells only)

streamed_bytes are the weights the backend could not keep resident under the cell's budget; the
fastest `device` cell of the same workload is the in-memory speed reference. Either term may be missing
(no link probe, no `device` cell); the bound is then the other one, or None.

The driver bound uses the run's managed-memory probe (the `managed_probe` table), for the way the
cell moves weights: brought in by prefetch (`prefetch_to_gpu`), by read-mostly prefetch
(`read_mostly_prefetch_to_gpu`, evict = read-mostly) or by faults (`fault_in`, prefetch = off); sent
back by migration (`evict_to_host`, the device→host bytes) or by dropping the read-mostly copy
(`drop_read_mostly_copy`). In the steady state every byte brought in is evicted again, and the two
are added, not overlapped: the probe found each migration holding the host thread, one after the
other. It is the ceiling UVM can reach on that machine, beside the link's.
Cells are mappings by column name (sqlite3.Row, dict, pandas row); NULL may arrive as None or NaN.
Standard library only, so the bench scripts can use it without pandas.
"""
import math


def present(value):
    """None for SQL NULL, whether it came as None or as pandas' NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def workload(cell, columns):
    """What a `device` cell must share with a cell to be its reference: its values of the workload
    parameters `columns` (analysis/axes.py, Axes.workload), so a cell with dropout is set against a
    `device` cell with the same dropout."""
    return tuple(cell[c] for c in columns)


def device_latencies(cells, columns):
    """Median latency of the fastest `device` cell of each workload (over `columns`): of its repeats,
    and of its placement settings (`launch`), which change how fast the same work runs in memory."""
    fastest = {}
    for c in cells:
        latency = present(c["latency_median_ms"]) if c["backend"] == "device" else None
        key = workload(c, columns)
        if latency is not None and (key not in fastest or latency < fastest[key]):
            fastest[key] = latency
    return fastest


def link_ms(cell):
    """Time the cell's streamed weights need on the measured pinned host→device link (ms)."""
    streamed, gbps = present(cell["streamed_bytes"]), present(cell["h2d_gbps"])
    if not gbps or streamed is None:
        return None
    return streamed / (gbps * 1e6)


def bound_ms(cell, device_ms, columns):
    """The cell's bound (ms), or None when neither term is known."""
    parts = [v for v in (link_ms(cell), present(device_ms.get(workload(cell, columns)))) if v is not None]
    return max(parts) if parts else None


def managed_rates(con):
    """{run_id: {operation: GB/s}} of the runs' managed-memory probes in an open sqlite3 connection
    (none before schema 4)."""
    if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'managed_probe'").fetchone():
        return {}
    rates = {}
    for run_id, operation, gbps in con.execute("SELECT run_id, operation, gbps FROM managed_probe"):
        rates.setdefault(run_id, {})[operation] = gbps
    return rates


# The backends that move weights through Unified Memory, so have a driver bound.
UVM_BACKENDS = ("uvm", "uvm-prefetch")


def driver_operations(cell):
    """The probe operations (bring in, evict) a UVM cell's weights go through."""
    read_mostly = cell["evict"] == "read-mostly"
    if str(cell["prefetch"]) == "off":
        bring = "fault_in"
    else:
        bring = "read_mostly_prefetch_to_gpu" if read_mostly else "prefetch_to_gpu"
    return bring, "drop_read_mostly_copy" if read_mostly else "evict_to_host"


def driver_link_ms(cell, rates):
    """Time the cell's streamed weights need at the rates its run's probe measured (ms); None for a
    cell that is not UVM, or whose run has no probe of those operations. rates: {run_id:
    {operation: GB/s}}."""
    if cell["backend"] not in UVM_BACKENDS:
        return None
    streamed = present(cell["streamed_bytes"])
    measured = rates.get(cell["run_id"])
    if streamed is None or not measured:
        return None
    bring, evict = driver_operations(cell)
    if not measured.get(bring) or not measured.get(evict):
        return None
    return streamed / (measured[bring] * 1e6) + streamed / (measured[evict] * 1e6)


def driver_bound_ms(cell, device_ms, rates, columns):
    """The cell's driver bound (ms), or None when the cell has no driver term."""
    driver = driver_link_ms(cell, rates)
    if driver is None:
        return None
    return max(v for v in (driver, present(device_ms.get(workload(cell, columns)))) if v is not None)

