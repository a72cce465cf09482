"""The bounds of a cell, shared by the report and scripts/bench/backends_table.py.

    bound        = max(link time, `device` latency of the same workload, host update time,
                       host memory time)
    link time    = max(bytes up / measured pinned H2D bandwidth,
                       link_to_host_bytes / measured pinned D2H bandwidth)
    bytes up     = link_to_device_bytes where stored (training), else streamed_bytes
    driver bound = max(brought-in bytes / the run's ceiling for the operation that brings them in,
                       evicted bytes / the run's ceiling for the operation that evicts them,
                       `device` latency of the same workload)          (uvm and uvm-prefetch cells only)

streamed_bytes are the weights the backend could not keep resident under the cell's budget, which
cross the link in every forward. A training step counts every byte it moved each way
(link_to_device_bytes, link_to_host_bytes): where its AdamW runs on the host (optimizer = host),
every unit's gradient to the host and its new weights back, except that explicit-copy streams its
streamed units in twice (forward and backward) and updates them in place on the host, so they
cross up twice and not again as new weights; the link is full duplex, so the two directions
overlap. The fastest `device` cell of the same workload with its optimizer on the device is the
in-memory speed reference. Such a step's update streams, per parameter, the fp32 master weights,
m and v in and out, the gradient in and the new weights out (kernels/compute/host_adamw.hpp): the
host update time is the bytes the memory moves for it, 24 + 3 × the dtype's bytes a parameter
(a line only written, the new weights', is read into the cache first), at the rate the cell's own
update arrays moved at, read and written in place where they lay (cells.host_arrays_gbps, schema
33: the state, the gradients and the weights, as many bytes as the update moves): a lent host's
memory is faster in some places than in others, and the run's probe of 4 GiB may have lain in a
faster place than the cell's arrays (harness/system/memory_bandwidth.hpp). Before schema 33, at
the rate its optimizer state alone moved at in place (cells.host_state_gbps), which the update,
with two more arrays, may not reach; before schema 30, at the rate the memory moved the same
streams in the run's probe (runs.host_update_gbps); before schema 29, the STREAM triad's
(runs.host_memory_gbps), which moved 4 bytes for the 3 STREAM counts; its three streams move less
than the update's nine where the cores set the rate, so such a bound may be beaten. The host
memory time is the update's bytes and every byte the step moved across the link together, at the
rate the host's memory moved the cell's update arrays in place and page-locked copies both ways
at once (cells.host_shared_gbps, schema 31; over the optimizer state alone before schema 33): the
link's copies read the weights from and write the gradients to the same memory the update
streams, and slow the cores' streams while they run, though the two together move more than the
cores alone. Any term of the bound may be missing (no link probe, no `device` cell, no host
measurement); the bound is then the largest of the others, or None.

A bound is a floor: no cell may run faster than it. faster_than() names the bounds a cell beats
(latency ÷ bound below 1); the report and backends_table.py flag them.

The driver bound is what the driver's rate for the cell's way of moving weights allows. The way:
brought in by prefetch (`prefetch_to_gpu`), by read-mostly prefetch (`read_mostly_prefetch_to_gpu`,
evict = read-mostly) or by faults (`fault_in`, prefetch = off); sent back by migration
(`evict_to_host`) or by dropping the read-mostly copy (`drop_read_mostly_copy`). The bytes are the
backend's own counts of one timed forward: it brings in all its streamed bytes, and evicts them
all but those still on the GPU when the forward ends (device_weight_bytes − resident_bytes: the
LRU's budget, the prefetch slots), which go back before the next one, outside the timed window.
(The UM counters, um_htod_bytes and um_dtoh_bytes, are of the traced iteration, evictions
between forwards included, and under-report fault-driven migrations: docs/benchmarks-history.md, issue 12.)
The two directions overlap (a migration back runs beside the next prefetch), so the driver term is
the larger of the two times, not their sum.

The ceiling of an operation in a run is the higher of
  - the run's managed-memory probe (`managed_probe`): the operation alone on a 512 MiB range, and
  - the best rate any ok cell of the run achieved through it: its bytes ÷ its median latency.
The probe's rate is not a ceiling of what the driver does in a forward by itself (on-demand faults
come with speculative prefetching, concurrent prefetches overlap), so a cell that moved its bytes
faster raises the ceiling to its own rate: no cell of the run beats its driver term, and the best
one sits at it. Ceiling.source says which it came from; a run without a probe of the operation has
no driver bound.
Cells are mappings by column name (dict, pandas row); NULL may arrive as None or NaN.
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


def in_memory(cell):
    """A `device` cell whose every step stays on the GPU: not one whose optimizer runs on the host."""
    return cell["backend"] == "device" and field(cell, "optimizer") in (None, "device")


def device_latencies(cells, columns):
    """Median latency of the fastest in-memory `device` cell of each workload (over `columns`): of its
    repeats, and of its placement settings (`launch`, `recompute`), which change how fast the same
    work runs in memory."""
    fastest = {}
    for c in cells:
        latency = present(c["latency_median_ms"]) if in_memory(c) else None
        key = workload(c, columns)
        if latency is not None and (key not in fastest or latency < fastest[key]):
            fastest[key] = latency
    return fastest


def link_ms(cell):
    """Time the cell's bytes need on the measured pinned link (ms): host→device its streamed weights,
    or for a training cell every byte its step moved that way, and device→host its gradients, the
    slower direction. None without the streamed bytes or any bandwidth they need."""
    streamed = present(cell["streamed_bytes"])
    if streamed is None:
        return None
    to_device = field(cell, "link_to_device_bytes")
    up = streamed if to_device is None else to_device
    down = field(cell, "link_to_host_bytes") or 0
    up_gbps, down_gbps = field(cell, "h2d_gbps"), field(cell, "d2h_gbps")
    times = [up / (up_gbps * 1e6)] if up_gbps else []
    if down and down_gbps:
        times.append(down / (down_gbps * 1e6))
    return max(times) if times else None


# Bytes of one parameter in each dtype.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


def host_update_bytes(cell):
    """Bytes the host's memory moves for an update on its cores, per the cell's parameters: master, m
    and v read and written in fp32, the gradient read and the weights written in the dtype, their
    lines read first (write-allocate). None for a cell whose optimizer is not on the host, or without
    its parameter count."""
    params = field(cell, "n_params")
    if field(cell, "optimizer") != "host" or not params:
        return None
    return params * (6 * 4 + 3 * DTYPE_BYTES[cell["dtype"]])


# The triad a[i] = b[i] + s·c[i] moves a's lines in too (write-allocate): 4 arrays' bytes for the
# 3 STREAM counts in runs.host_memory_gbps.
TRIAD_MOVED_PER_COUNTED = 4 / 3


def host_update_ms(cell):
    """Time of the cell's host update at the rate its memory was measured to move at (ms): the rate
    of the cell's own update arrays where it has it, else of its own state, else the run's probe of
    the update's streams, else the run's triad; None without any."""
    update = host_update_bytes(cell)
    arrays, state, streams, triad = (field(cell, c) for c in
                                     ("host_arrays_gbps", "host_state_gbps", "host_update_gbps", "host_memory_gbps"))
    moved_gbps = arrays or state or streams or (triad * TRIAD_MOVED_PER_COUNTED if triad else None)
    return update / (moved_gbps * 1e6) if update and moved_gbps else None


def host_memory_ms(cell):
    """Time the host's memory needs for the cell's update and its link bytes together (ms), at the rate
    it moved the cell's update arrays (its state before schema 33) and the link's copies at once; None
    without that rate, the update or the link bytes (before schema 31, or an optimizer not on the host)."""
    update, shared = host_update_bytes(cell), field(cell, "host_shared_gbps")
    up, down = field(cell, "link_to_device_bytes"), field(cell, "link_to_host_bytes")
    if not update or not shared or up is None or down is None:
        return None
    return (update + up + down) / (shared * 1e6)


def bound_ms(cell, device_ms, columns):
    """The cell's bound (ms), or None when no term is known."""
    parts = [v for v in (link_ms(cell), present(device_ms.get(workload(cell, columns))), host_update_ms(cell),
                         host_memory_ms(cell)) if v is not None]
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


def field(cell, column):
    """The cell's value of `column`, None where it is NULL or the cell lacks the column (older files)."""
    try:
        return present(cell[column])
    except (KeyError, IndexError):
        return None


def moved_bytes(cell):
    """{operation: bytes} a UVM cell moves through each of its two operations in one timed forward;
    None for a cell that is not UVM or whose streamed bytes are unknown."""
    streamed = field(cell, "streamed_bytes")
    if cell["backend"] not in UVM_BACKENDS or streamed is None:
        return None
    held, resident = field(cell, "device_weight_bytes"), field(cell, "resident_bytes")
    left_on_gpu = held - resident if held is not None and resident is not None else 0
    bring, evict = driver_operations(cell)
    return {bring: streamed, evict: max(0, streamed - left_on_gpu)}


class Ceiling:
    """The rate (GB/s) a run's driver reaches for one operation: the probe's, or best_cell's
    (its cell_id) where that cell moved its bytes faster."""

    def __init__(self, probe_gbps, best_cell=None, best_gbps=None):
        self.probe_gbps, self.best_cell, self.best_gbps = probe_gbps, best_cell, best_gbps

    @property
    def from_cell(self):
        return self.best_gbps is not None and self.best_gbps > self.probe_gbps

    @property
    def gbps(self):
        return self.best_gbps if self.from_cell else self.probe_gbps

    @property
    def source(self):
        return f"cell {self.best_cell}" if self.from_cell else "probe"


def driver_ceilings(cells, rates):
    """{run_id: {operation: Ceiling}} for the operations each run's probe measured. cells: the
    measured cells (ok, with a latency); rates: {run_id: {operation: GB/s}} (managed_rates)."""
    ceilings = {run: {op: Ceiling(gbps) for op, gbps in probe.items() if gbps} for run, probe in rates.items()}
    for c in cells:
        latency, moved = field(c, "latency_median_ms"), moved_bytes(c)
        if not latency or moved is None or c["run_id"] not in ceilings:
            continue
        for op, nbytes in moved.items():
            ceiling, gbps = ceilings[c["run_id"]].get(op), nbytes / (latency * 1e6)
            if ceiling is not None and nbytes > 0 and (ceiling.best_gbps is None or gbps > ceiling.best_gbps):
                ceiling.best_cell, ceiling.best_gbps = field(c, "cell_id"), gbps
    return ceilings


def driver_term(cell, ceilings):
    """(ms, what set it) for the cell's bytes at its run's ceilings: the slower operation's time,
    and "operation (probe)" or "operation (cell N)". None for a cell that is not UVM, or whose run has
    no ceiling for its operations."""
    moved = moved_bytes(cell)
    run = ceilings.get(cell["run_id"], {})
    if moved is None or any(op not in run for op in moved):
        return None
    ms, op = max((nbytes / (run[op].gbps * 1e6), op) for op, nbytes in moved.items())
    return ms, f"{op} ({run[op].source})"


def driver_link_ms(cell, ceilings):
    """Time the cell's weights need at its run's ceilings (ms), or None (driver_term)."""
    term = driver_term(cell, ceilings)
    return None if term is None else term[0]


def driver_bound(cell, device_ms, ceilings, columns):
    """(the cell's driver bound in ms, what set it: driver_term's text or "device"), or None when
    the cell has no driver term."""
    term = driver_term(cell, ceilings)
    if term is None:
        return None
    device = present(device_ms.get(workload(cell, columns)))
    return (device, "device") if device is not None and device > term[0] else term


def driver_bound_ms(cell, device_ms, ceilings, columns):
    """The cell's driver bound (ms), or None when the cell has no driver term."""
    bound = driver_bound(cell, device_ms, ceilings, columns)
    return None if bound is None else bound[0]


# The ratios of a cell to its bounds (latency ÷ bound), under the names the report gives the bounds.
BOUND_RATIOS = (("x_bound", "bound"), ("x_driver_bound", "driver bound"))

# A ratio below this beats its bound. Not 1: the cell that set its run's ceiling sits at 1 up to
# the rounding of bytes ÷ rate.
BEATEN_BELOW = 1.0 - 1e-9


def beats(ratio):
    """Whether latency ÷ bound = `ratio` is faster than the bound allows."""
    return ratio is not None and ratio < BEATEN_BELOW


def faster_than(cell):
    """The names of the bounds the cell beats (latency ÷ bound below 1), ", "-joined; None when none:
    a bound is a floor, so each is a fault of the bound or of the measurement to look into."""
    beaten = [name for column, name in BOUND_RATIOS if beats(field(cell, column))]
    return ", ".join(beaten) if beaten else None


def is_measured(cell):
    """A cell with bounds: an ok GPU cell (as in scripts/bench/backends_table.py; a host cell has no link)."""
    return cell["status"] == "ok" and cell["backend"] != "host"


def cell_bounds(records, rates, workload):
    """Each cell's bounds, for cells as mappings (one database's, with their run's h2d_gbps), the
    runs' probe rates (managed_rates) and the workload columns: per record, in order, a dict of
    bound_ms, x_bound, driver_bound_ms, driver_bound_from, x_driver_bound (None where unknown) and
    faster_than. The `device` references and the driver ceilings come from the measured cells."""
    measured = [is_measured(r) for r in records]
    device_ms = device_latencies([r for r, m in zip(records, measured) if m], workload)
    ceilings = driver_ceilings([r for r, m in zip(records, measured) if m and present(r["latency_median_ms"])], rates)
    bounds = []
    for r, m in zip(records, measured):
        latency = present(r["latency_median_ms"])
        bound = bound_ms(r, device_ms, workload) if m else None
        driver = driver_bound(r, device_ms, ceilings, workload) if m else None
        b = dict(bound_ms=bound, driver_bound_ms=driver[0] if driver else None,
                 driver_bound_from=driver[1] if driver else None)
        b["x_bound"] = latency / bound if latency is not None and bound else None
        b["x_driver_bound"] = latency / b["driver_bound_ms"] if latency is not None and b["driver_bound_ms"] else None
        b["faster_than"] = faster_than(b)
        bounds.append(b)
    return bounds

