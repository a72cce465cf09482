#!/usr/bin/env python3
"""The numbers the report (analysis/) and scripts/bench/backends_table.py show, against values worked
out by hand from small fixtures.

Every expected value below is a literal computed on paper from the fixture's numbers (the comment
beside it shows the arithmetic), never by calling the code under test: a test that re-derives its
expectation with the same function passes whatever that function gets wrong. The fixtures are
results databases written by the real binary (so the schema is the one harness/store/schema.sql defines),
whose cells are then replaced with cells of chosen numbers; GPU cells cannot be measured here, and
chosen numbers make the arithmetic checkable.

The binary is $SWEETSPOT_BINARY (ctest sets it), else build/sweetspot; without either, the tests
that need a database are skipped with a message. tests/test_report.cpp covers what this file does
not repeat: that every figure is drawn as a valid PNG/SVG, the page loads in a browser, and
time_split's link rate and transfers() rows on its synthetic trace.

Run: python3 tests/test_analysis.py [-v] [TestClass.test_name], from any folder.
"""
import importlib.util
import itertools
import math
import itertools
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import unittest
import unittest.mock

sys.dont_write_bytecode = True  # keep analysis/ free of __pycache__, as report.py does

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "analysis"))


def _modules_or_reexec():
    """matplotlib and pandas are Debian packages; a python3 earlier on PATH (pyenv, a virtualenv) may
    lack them. Then rerun with $SWEETSPOT_PYTHON, else Debian's /usr/bin/python3, as `sweetspot
    report` does (harness/cli/report_command.cpp), rather than fail on an interpreter the user did not pick."""
    try:
        import matplotlib  # noqa: F401
        import pandas  # noqa: F401
        return
    except ImportError as e:
        missing = e
    other = os.environ.get("SWEETSPOT_PYTHON") or "/usr/bin/python3"
    if (not os.environ.get("SWEETSPOT_TEST_ANALYSIS_REEXEC") and os.access(other, os.X_OK)
            and os.path.realpath(other) != os.path.realpath(sys.executable)):
        os.environ["SWEETSPOT_TEST_ANALYSIS_REEXEC"] = "1"
        os.execv(other, [other, str(pathlib.Path(__file__).resolve()), *sys.argv[1:]])
    sys.exit(f"test_analysis.py: {sys.executable} cannot import matplotlib and pandas ({missing}); install them "
             "with scripts/install-deps.sh (python3-matplotlib python3-pandas), or set SWEETSPOT_PYTHON.")


_modules_or_reexec()

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

import beaten_bounds  # noqa: E402
import bound  # noqa: E402
import html_page  # noqa: E402
import report  # noqa: E402
import time_split  # noqa: E402
from cell_table import cell_table, same_in_every_cell  # noqa: E402
from figures import (bandwidth, cell_phases, driver_oversubscription, latency_prefetch, normalized,  # noqa: E402
                     oversubscription, packing, peak_memory, throughput, timeline, training, training_memory,
                     training_phases, training_sweetspot, um_traffic)
from figures.common import Skip, ratio_axis, workload_title  # noqa: E402
from figures.sweeps import Swept, series  # noqa: E402
from axes import OLDER_AXES, Axes  # noqa: E402
from results_db import ResultsDb, connect  # noqa: E402

BACKENDS_TABLE = REPO / "scripts" / "bench" / "backends_table.py"
VARIANTS_TABLE = REPO / "scripts" / "bench" / "variants_table.py"
PACKING_TABLE = REPO / "scripts" / "bench" / "packing_table.py"
MEMORY_TABLE = REPO / "scripts" / "bench" / "memory_table.py"
TRAIN_SIDE_BY_SIDE = REPO / "scripts" / "bench" / "train_side_by_side.py"
RECOMPUTE_TABLE = REPO / "scripts" / "bench" / "recompute_table.py"
OVERHEAD_TABLE = REPO / "scripts" / "bench" / "overhead_table.py"
FIT_CHECK = REPO / "scripts" / "bench" / "fit_check.py"
TEMPO_STUDY = REPO / "scripts" / "bench" / "tempo_study.py"
GB = 1_000_000_000
MIB = 2**20
GIB = 2**30

# --- fixture databases ----------------------------------------------------------------------------

TEMPLATE_MATRIX = """name = "test-analysis-template"
[defaults]
backend = "host"
model = "tiny"
warmups = 0
iterations = 1
batch = 1
seq = 8
"""

_template = {}


def sweetspot_binary():
    """$SWEETSPOT_BINARY (which must then exist: ctest sets it), else build/sweetspot, else None."""
    asked = os.environ.get("SWEETSPOT_BINARY")
    if asked:
        if not os.access(asked, os.X_OK):
            raise AssertionError(f"SWEETSPOT_BINARY={asked} is not an executable file")
        return asked
    default = REPO / "build" / "sweetspot"
    return str(default) if os.access(default, os.X_OK) else None


def template_db():
    """A database of one host cell, written once per process by the real binary."""
    if "path" not in _template:
        binary = sweetspot_binary()
        if binary is None:
            raise unittest.SkipTest("no sweetspot binary to write a fixture database with: build it (build/sweetspot) "
                                    "or set SWEETSPOT_BINARY; ctest sets it")
        folder = tempfile.mkdtemp(prefix="test_analysis_template_")
        matrix = os.path.join(folder, "template.toml")
        with open(matrix, "w") as f:
            f.write(TEMPLATE_MATRIX)
        path = os.path.join(folder, "template.db")
        done = subprocess.run([binary, "run", matrix, "--db", path], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise AssertionError(f"{binary} run failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        _template["folder"] = folder
        _template["path"] = path
    return _template["path"]


def tearDownModule():
    if "folder" in _template:
        shutil.rmtree(_template["folder"], ignore_errors=True)


class FixtureDb:
    """A copy of the template database with its cells removed, to which tests add runs, cells and
    events with chosen numbers. Columns a test does not name keep the template cell's values."""

    def __init__(self, folder, name="fixture.db"):
        self.path = os.path.join(folder, name)
        src = sqlite3.connect(template_db())
        dst = sqlite3.connect(self.path)
        src.backup(dst)
        src.close()
        self.con = dst
        self.con.row_factory = sqlite3.Row
        self.cell_template = dict(self.con.execute("SELECT * FROM cells").fetchone())
        self.run_template = dict(self.con.execute("SELECT * FROM runs").fetchone())
        self.con.execute("DELETE FROM iterations")
        self.con.execute("DELETE FROM cell_phases")
        self.con.execute("DELETE FROM cells")
        self.keys = 0
        self.strings = {}

    def insert(self, table, row):
        names = list(row)
        columns = ", ".join(f'"{n}"' for n in names)  # quoted: "end" is an SQL keyword
        self.con.execute(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(names))})",
                         [row[n] for n in names])
        return self.con.execute("SELECT last_insert_rowid()").fetchone()[0]

    def set_run(self, run_id=1, **fields):
        for name, value in fields.items():
            self.con.execute(f"UPDATE runs SET {name} = ? WHERE run_id = ?", (value, run_id))

    def add_run(self, **fields):
        row = dict(self.run_template, **fields)
        del row["run_id"]
        return self.insert("runs", row)

    def add_cell(self, **fields):
        self.keys += 1
        row = dict(self.cell_template, cell_key=f"{self.keys:016x}", cell_index=self.keys, check_rel_err=None,
                   **fields)
        del row["cell_id"]
        return self.insert("cells", row)

    def string_id(self, text):
        if text not in self.strings:
            self.strings[text] = self.insert("StringIds", {"value": text})
        return self.strings[text]

    def add_kernel(self, cell_id, start, end, stream):
        name = self.string_id("fixture_kernel")
        self.insert("CUPTI_ACTIVITY_KIND_KERNEL", dict(
            cell_id=cell_id, start=start, end=end, deviceId=0, contextId=1, streamId=stream, correlationId=0,
            gridX=1, gridY=1, gridZ=1, blockX=1, blockY=1, blockZ=1, registersPerThread=0, staticSharedMemory=0,
            dynamicSharedMemory=0, shortName=name, demangledName=name))

    def add_copy(self, cell_id, start, end, kind, nbytes, cause=None, stream=0):
        self.insert("CUPTI_ACTIVITY_KIND_MEMCPY", dict(
            cell_id=cell_id, start=start, end=end, deviceId=0, contextId=1, streamId=stream, correlationId=0,
            copyKind=kind, srcKind=0, dstKind=0, bytes=nbytes, migrationCause=cause))

    def add_range(self, cell_id, start, end, text):
        self.insert("NVTX_EVENTS", dict(cell_id=cell_id, start=start, end=end, textId=self.string_id(text),
                                        globalTid=1, eventType=59))

    def close(self):
        self.con.commit()
        self.con.close()


def gpu_cell(db, backend, **fields):
    """A GPU cell of the tiny model's fp32 1×8 baseline workload unless fields say otherwise."""
    defaults = dict(backend=backend, model="tiny", variant="baseline", dtype="fp32", batch=1, seq=8, tf32=0,
                    status="ok", reason=None, streams=1, prefetch="off", resident="interleaved", evict="migrate",
                    trace_iterations=0, streamed_gbps=None)
    return db.add_cell(**dict(defaults, **fields))


def report_data(path):
    return report.ReportData(ResultsDb(path), None)


class DbTest(unittest.TestCase):
    """A test class with one fixture database, built once by build(db)."""

    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.mkdtemp(prefix="test_analysis_")
        try:
            db = FixtureDb(cls.folder)
            cls.ids = cls.build(db)
            db.close()
            cls.path = db.path
        except BaseException:
            shutil.rmtree(cls.folder, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.folder, ignore_errors=True)

    def render(self, module, path=None):
        """The figure `module` draws from the fixture (or the database at `path`), closed after the test."""
        drawn = module.render(report_data(path or self.path))
        self.addCleanup(plt.close, drawn.figure)
        return drawn


# --- what a drawn figure shows ------------------------------------------------------------------

def suptitle(figure):
    """The figure's title (matplotlib 3.6, Debian 12's, has no Figure.get_suptitle)."""
    return figure._suptitle.get_text() if figure._suptitle is not None else ""


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def errorbar_data(ax):
    """[(x values, y values, [(x, bar low, bar high)])] of each errorbar line in the panel."""
    out = []
    for container in ax.containers:
        line, _, (bars,) = container.lines
        ends = [(float(a[0]), float(a[1]), float(b[1])) for a, b in bars.get_segments()]
        out.append((list(line.get_xdata()), list(line.get_ydata()), ends))
    return out


# --- analysis/bound.py ----------------------------------------------------------------------------

# The workload parameters of the cells below (a database's come from its axes, analysis/axes.py).
WORKLOAD = ("model", "dtype", "batch", "seq", "variant", "tf32", "dropout")


def cell(backend="explicit-copy", streamed=6 * GB, gbps=25.0, latency=300.0, **workload):
    c = dict(model="tiny", dtype="fp32", batch=1, seq=8, variant="baseline", tf32=0, dropout=0.0, backend=backend,
             streamed_bytes=streamed, h2d_gbps=gbps, latency_median_ms=latency)
    c.update(workload)
    return c


class BoundTest(unittest.TestCase):
    """bound = max(streamed bytes ÷ pinned H2D bandwidth, the `device` latency of the same workload)."""

    def test_link_ms_is_bytes_over_gbps(self):
        self.assertAlmostEqual(bound.link_ms(cell(streamed=6 * GB, gbps=25.0)), 240.0)  # 6e9 B / 25e9 B/s
        self.assertAlmostEqual(bound.link_ms(cell(streamed=1_500_000, gbps=12.5)), 0.12)  # 1.5e6 / 12.5e9 s
        self.assertEqual(bound.link_ms(cell(streamed=0)), 0.0)

    def test_link_ms_with_the_optimizer_on_the_host_is_the_slower_direction(self):
        # 4e9 B of gradients down at 20 GB/s (200 ms) against 4e9 B of weights up at 25 GB/s (160 ms).
        host = dict(optimizer="host", d2h_gbps=20.0, link_to_host_bytes=4 * GB, link_to_device_bytes=4 * GB)
        self.assertAlmostEqual(bound.link_ms(cell("device", streamed=0, **host)), 200.0)
        host.update(d2h_gbps=40.0)
        self.assertAlmostEqual(bound.link_ms(cell("device", streamed=0, **host)), 160.0)
        # explicit-copy streaming 1e9 B of 4e9: the step's bytes up are the streamed ones twice and the
        # resident ones' new weights, 2e9 + 3e9 at 25 GB/s (200 ms), not streamed_bytes again on top.
        copy = dict(host, link_to_device_bytes=5 * GB)
        self.assertAlmostEqual(bound.link_ms(cell(streamed=1 * GB, **copy)), 200.0)
        # Without the D2H probe the way down is no term; without either, no link time.
        host.update(d2h_gbps=None)
        self.assertAlmostEqual(bound.link_ms(cell("device", streamed=0, **host)), 160.0)
        self.assertIsNone(bound.link_ms(cell("device", streamed=0, gbps=None, **host)))
        # The optimizer on the device moves nothing: 0 bytes each way, or columns an older file lacks.
        device = dict(optimizer="device", d2h_gbps=20.0, link_to_host_bytes=0, link_to_device_bytes=0)
        self.assertEqual(bound.link_ms(cell("device", streamed=0, **device)), 0.0)

    def test_only_in_memory_device_cells_are_references(self):
        # A `device` cell whose optimizer runs on the host is bounded by the in-memory step, not one.
        on_host = cell("device", streamed=0, latency=50.0, optimizer="host")
        ref = bound.device_latencies([on_host, cell("device", streamed=0, latency=100.0, optimizer="device")], WORKLOAD)
        self.assertEqual(list(ref.values()), [100.0])
        self.assertEqual(bound.device_latencies([on_host], WORKLOAD), {})
        self.assertEqual(list(bound.device_latencies([cell("device", latency=70.0)], WORKLOAD).values()), [70.0])

    def test_host_update_term_is_adamw_bytes_over_the_host_memory_bandwidth(self):
        # bf16: 24 bytes of fp32 state (master, m, v read and written), 2 of gradient in and 2 + 2 of
        # weights out and their lines read first, 30 bytes a parameter; 1.5e9 parameters: 45e9 B. A
        # triad counted at 20 GB/s moved 20 · 4/3 GB/s (a's lines read too): 45e9 / 26.67e9 = 1687.5 ms.
        host = dict(optimizer="host", n_params=1_500_000_000, host_memory_gbps=20.0)
        self.assertEqual(bound.host_update_bytes(cell("device", dtype="bf16", **host)), 45_000_000_000)
        self.assertAlmostEqual(bound.host_update_ms(cell("device", dtype="bf16", **host)), 1687.5)
        # fp32: 3 × 2 more, 36 bytes a parameter: 2025 ms.
        self.assertAlmostEqual(bound.host_update_ms(cell("device", dtype="fp32", **host)), 2025.0)
        # The largest term: above the link (0 streamed, 4e9 B each way at 25 GB/s: 160 ms) and the
        # in-memory step (1000 ms); below a slower in-memory step it is not the bound.
        moved = dict(host, d2h_gbps=25.0, link_to_host_bytes=4 * GB, link_to_device_bytes=4 * GB)
        slow = cell("device", streamed=0, dtype="bf16", latency=3000.0, **moved)
        self.assertAlmostEqual(bound.bound_ms(slow, {bound.workload(slow, WORKLOAD): 1000.0}, WORKLOAD), 1687.5)
        self.assertAlmostEqual(bound.bound_ms(slow, {bound.workload(slow, WORKLOAD): 2500.0}, WORKLOAD), 2500.0)
        # The update's own streams' rate, where the run measured it, is the rate: 45e9 B at 30 GB/s
        # moved, 1500 ms, the triad's beside it set aside.
        both = cell("device", dtype="bf16", host_update_gbps=30.0, **host)
        self.assertAlmostEqual(bound.host_update_ms(both), 1500.0)
        streams_only = cell("device", dtype="bf16", **dict(host, host_memory_gbps=None, host_update_gbps=30.0))
        self.assertAlmostEqual(bound.host_update_ms(streams_only), 1500.0)
        # The rate of the cell's own state, where it was measured (schema 30), before either of the
        # run's probes: 45e9 B at 25 GB/s, 1800 ms.
        own = cell("device", dtype="bf16", host_state_gbps=25.0, host_update_gbps=30.0, **host)
        self.assertAlmostEqual(bound.host_update_ms(own), 1800.0)
        # The rate of all the update's arrays in place (schema 33), before the state's alone: 45e9 B at
        # 20 GB/s, 2250 ms.
        arrays = cell("device", dtype="bf16", host_arrays_gbps=20.0, host_state_gbps=25.0, **host)
        self.assertAlmostEqual(bound.host_update_ms(arrays), 2250.0)
        # No term: the optimizer on the device, no measurement (an older file), no parameter count.
        self.assertIsNone(bound.host_update_ms(cell("device", dtype="bf16", **dict(host, optimizer="device"))))
        self.assertIsNone(bound.host_update_ms(cell("device", dtype="bf16", **dict(host, host_memory_gbps=None))))
        self.assertIsNone(bound.host_update_ms(cell("device", dtype="bf16", **dict(host, n_params=None))))
        self.assertIsNone(bound.host_update_ms(cell("device", dtype="bf16")))

    def test_host_memory_term_is_the_update_and_the_link_bytes_at_their_shared_rate(self):
        # bf16, 1.5e9 parameters: the update's 45e9 B; 10e9 B up and 5e9 down across the link; 60e9 B
        # through the host's memory at 40 GB/s together: 1500 ms.
        host = dict(optimizer="host", n_params=1_500_000_000, host_state_gbps=36.0, host_shared_gbps=40.0,
                    link_to_device_bytes=10 * GB, link_to_host_bytes=5 * GB)
        shared = cell("device", streamed=0, dtype="bf16", **host)
        self.assertAlmostEqual(bound.host_memory_ms(shared), 1500.0)
        # Above the host update alone (45e9 B at 36 GB/s: 1250 ms), so the bound.
        self.assertAlmostEqual(bound.host_update_ms(shared), 1250.0)
        self.assertAlmostEqual(bound.bound_ms(shared, {}, WORKLOAD), 1500.0)
        # No term before schema 31, without the link's bytes, or with the optimizer on the device.
        for missing in ({"host_shared_gbps": None}, {"link_to_host_bytes": None}, {"optimizer": "device"}):
            self.assertIsNone(bound.host_memory_ms(cell("device", dtype="bf16", **dict(host, **missing))), missing)

    def test_link_ms_unknown_without_bandwidth_or_bytes(self):
        for gbps in (None, float("nan"), 0.0):
            self.assertIsNone(bound.link_ms(cell(gbps=gbps)), gbps)
        for streamed in (None, float("nan")):
            self.assertIsNone(bound.link_ms(cell(streamed=streamed)), streamed)

    def test_bound_is_the_larger_term(self):
        device = cell("device", streamed=0, latency=100.0)
        cells = [device, cell(streamed=6 * GB), cell(streamed=2 * GB)]
        ref = bound.device_latencies(cells, WORKLOAD)
        self.assertAlmostEqual(bound.bound_ms(cell(streamed=6 * GB), ref, WORKLOAD), 240.0)  # link 240 > device 100
        self.assertAlmostEqual(bound.bound_ms(cell(streamed=2 * GB), ref, WORKLOAD), 100.0)  # link 80 < device 100
        self.assertAlmostEqual(bound.bound_ms(device, ref, WORKLOAD), 100.0)  # its own latency; link 0

    def test_bound_with_one_term_missing(self):
        ref = bound.device_latencies([cell("device", streamed=0, latency=100.0)], WORKLOAD)
        self.assertAlmostEqual(bound.bound_ms(cell(streamed=6 * GB), {}, WORKLOAD), 240.0)  # no device cell: link
        for gbps in (None, float("nan")):  # no link probe: device
            self.assertAlmostEqual(bound.bound_ms(cell(streamed=6 * GB, gbps=gbps), ref, WORKLOAD), 100.0)
        self.assertAlmostEqual(bound.bound_ms(cell(streamed=float("nan")), ref, WORKLOAD), 100.0)
        self.assertIsNone(bound.bound_ms(cell(gbps=None), {}, WORKLOAD))
        self.assertIsNone(bound.bound_ms(cell(gbps=float("nan")), {}, WORKLOAD))
        nan_device = bound.device_latencies([cell("device", latency=float("nan"))], WORKLOAD)
        self.assertAlmostEqual(bound.bound_ms(cell(streamed=2 * GB), nan_device, WORKLOAD), 80.0)  # NaN latency: link only

    def test_reference_is_the_device_cell_of_the_same_workload(self):
        # The device cell takes 1000 ms, far above the 240 ms link time: a wrong reference shows.
        device = cell("device", streamed=0, latency=1000.0)
        ref = bound.device_latencies([device], WORKLOAD)
        self.assertAlmostEqual(bound.bound_ms(cell(), ref, WORKLOAD), 1000.0)
        for other in (dict(dtype="fp16"), dict(batch=2), dict(seq=16), dict(variant="attn_ln"), dict(tf32=1),
                      dict(model="tiny_odd"), dict(dropout=0.1)):
            self.assertAlmostEqual(bound.bound_ms(cell(**other), ref, WORKLOAD), 240.0, msg=other)

    def test_only_device_cells_are_references(self):
        ref = bound.device_latencies([cell("explicit-copy", latency=1000.0), cell("uvm", latency=900.0),
                                      cell("host", latency=800.0)], WORKLOAD)
        self.assertEqual(ref, {})
        ref = bound.device_latencies([cell("device", latency=50.0, dtype="fp16"), cell("device", latency=70.0)], WORKLOAD)
        self.assertEqual(sorted(ref.values()), [50.0, 70.0])

    def test_reference_is_the_fastest_device_cell_of_the_workload(self):
        """Repeats and launch settings of one workload: the fastest is the in-memory reference, in any
        order; a NaN latency is no reference."""
        cells = [cell("device", latency=70.0), cell("device", latency=60.0, launch="graphs"),
                 cell("device", latency=float("nan")), cell("device", latency=65.0, repeat=2)]
        for order in (cells, cells[::-1]):
            self.assertEqual(list(bound.device_latencies(order, WORKLOAD).values()), [60.0])


class DriverBoundTest(unittest.TestCase):
    """driver bound = max(brought-in bytes ÷ the run's ceiling for bringing them in, bytes evicted during
    the forward ÷ its ceiling for evicting them, the `device` latency) for uvm and uvm-prefetch cells;
    a ceiling is the probe's rate, or the best rate a cell of the run achieved where that is higher."""

    RATES = {1: {"prefetch_to_gpu": 40.0, "read_mostly_prefetch_to_gpu": 32.0, "evict_to_host": 10.0,
                 "drop_read_mostly_copy": 500.0, "fault_in": 8.0}}

    def uvm(self, backend="uvm-prefetch", prefetch="jit", evict="migrate", run_id=1, **fields):
        c = cell(backend, streamed=4 * GB, run_id=run_id, prefetch=prefetch, evict=evict)
        c.update(fields)
        return c

    def probe_only(self, rates=None):
        return bound.driver_ceilings([], self.RATES if rates is None else rates)

    def test_operations_follow_prefetch_and_evict(self):
        self.assertEqual(bound.driver_operations(self.uvm()), ("prefetch_to_gpu", "evict_to_host"))
        self.assertEqual(bound.driver_operations(self.uvm(prefetch=2, evict="read-mostly")),
                         ("read_mostly_prefetch_to_gpu", "drop_read_mostly_copy"))
        self.assertEqual(bound.driver_operations(self.uvm("uvm", prefetch="off")), ("fault_in", "evict_to_host"))
        self.assertEqual(bound.driver_operations(self.uvm("uvm", prefetch="off", evict="read-mostly")),
                         ("fault_in", "drop_read_mostly_copy"))

    def test_moved_bytes_leave_out_what_stays_on_the_gpu_after_the_forward(self):
        # Without the placement columns (older files) every streamed byte is evicted again.
        self.assertEqual(bound.moved_bytes(self.uvm()), {"prefetch_to_gpu": 4 * GB, "evict_to_host": 4 * GB})
        # Prefetch slots: 3 GB held for weights, 2.5 GB of them resident: 0.5 GB of slots go back after the forward.
        self.assertEqual(bound.moved_bytes(self.uvm(device_weight_bytes=3 * GB, resident_bytes=2.5 * GB)),
                         {"prefetch_to_gpu": 4 * GB, "evict_to_host": 3.5 * GB})
        # uvm whose budget holds all 4 GB: nothing is evicted during the forward.
        self.assertEqual(bound.moved_bytes(self.uvm("uvm", prefetch="off", device_weight_bytes=4 * GB, resident_bytes=0)),
                         {"fault_in": 4 * GB, "evict_to_host": 0})
        self.assertIsNone(bound.moved_bytes(self.uvm("explicit-copy")))

    def test_the_slower_operation_sets_the_driver_term(self):
        # max(4e9 / 40e9, 4e9 / 10e9) = max(100, 400); the old sum was 500
        self.assertAlmostEqual(bound.driver_link_ms(self.uvm(), self.probe_only()), 400.0)
        self.assertEqual(bound.driver_term(self.uvm(), self.probe_only())[1], "evict_to_host (probe)")
        # max(4e9 / 32e9, 4e9 / 500e9) = max(125, 8)
        self.assertAlmostEqual(bound.driver_link_ms(self.uvm(evict="read-mostly"), self.probe_only()), 125.0)
        # max(4e9 / 8e9, 3.5e9 / 10e9) = max(500, 350)
        fault = self.uvm("uvm", prefetch="off", device_weight_bytes=0.5 * GB, resident_bytes=0)
        self.assertAlmostEqual(bound.driver_link_ms(fault, self.probe_only()), 500.0)
        self.assertEqual(bound.driver_term(fault, self.probe_only())[1], "fault_in (probe)")

    def test_a_faster_cell_raises_the_ceiling_to_its_rate(self):
        """uvm with all 4 GB inside its budget took 250 ms: 4e9 B / 0.25 s = 16 GB/s faulted in, twice
        the probe's 8. It sits at its bound (250 ms, 1.0), where the probe's would be 500 ms (0.5).
        The 50 % cell (300 ms) faulted in at 13.3 GB/s and evicted 2e9 B / 0.3 s = 6.7 GB/s, under
        the probe's 10: its bound is max(4e9 / 16e9, 2e9 / 10e9) = max(250, 200) = 250 ms."""
        full = self.uvm("uvm", prefetch="off", cell_id=5, latency_median_ms=250.0, device_weight_bytes=4 * GB,
                        resident_bytes=0)
        half = self.uvm("uvm", prefetch="off", cell_id=4, latency_median_ms=300.0, device_weight_bytes=2 * GB,
                        resident_bytes=0)
        ceilings = bound.driver_ceilings([full, half], self.RATES)
        fault, evict = ceilings[1]["fault_in"], ceilings[1]["evict_to_host"]
        self.assertEqual((fault.probe_gbps, fault.best_cell, fault.gbps, fault.source), (8.0, 5, 16.0, "cell 5"))
        self.assertEqual((evict.best_cell, evict.gbps, evict.source), (4, 10.0, "probe"))
        self.assertAlmostEqual(evict.best_gbps, 2e9 / 0.3e9)
        self.assertEqual(bound.driver_bound(full, {}, ceilings, WORKLOAD), (250.0, "fault_in (cell 5)"))
        self.assertEqual(bound.driver_bound(half, {}, ceilings, WORKLOAD), (250.0, "fault_in (cell 5)"))
        # A cell of another run, or an operation the run's probe did not measure, leaves the ceilings alone.
        other = bound.driver_ceilings([dict(full, run_id=2)], self.RATES)
        self.assertEqual(other[1]["fault_in"].source, "probe")
        self.assertIsNone(bound.driver_term(full, bound.driver_ceilings([full], {1: {"fault_in": 8.0}})))

    def test_no_driver_term_outside_uvm_or_without_a_probe(self):
        for backend in ("explicit-copy", "device", "host"):
            self.assertIsNone(bound.driver_link_ms(self.uvm(backend), self.probe_only()), backend)
        self.assertIsNone(bound.driver_link_ms(self.uvm(run_id=2), self.probe_only()))  # that run has no probe
        self.assertIsNone(bound.driver_link_ms(self.uvm(), self.probe_only({1: {"prefetch_to_gpu": 40.0}})))
        self.assertIsNone(bound.driver_link_ms(self.uvm(streamed_bytes=None), self.probe_only()))

    def test_driver_bound_is_the_larger_term(self):
        ref = bound.device_latencies([cell("device", streamed=0, latency=600.0)], WORKLOAD)
        self.assertEqual(bound.driver_bound(self.uvm(), ref, self.probe_only(), WORKLOAD), (600.0, "device"))  # > 400
        self.assertAlmostEqual(bound.driver_bound_ms(self.uvm(), {}, self.probe_only(), WORKLOAD), 400.0)  # no device
        slow = self.uvm("uvm", prefetch="off")  # max(4e9 / 8e9, 4e9 / 10e9) = 500 < 600
        self.assertAlmostEqual(bound.driver_bound_ms(slow, ref, self.probe_only(), WORKLOAD), 600.0)
        self.assertIsNone(bound.driver_bound_ms(self.uvm("explicit-copy"), ref, self.probe_only(), WORKLOAD))

    def test_faster_than_names_the_bounds_a_cell_beats(self):
        self.assertEqual(bound.faster_than(dict(x_bound=0.9, x_driver_bound=1.1)), "bound")
        self.assertEqual(bound.faster_than(dict(x_bound=0.99, x_driver_bound=0.5)), "bound, driver bound")
        self.assertIsNone(bound.faster_than(dict(x_bound=1.0, x_driver_bound=float("nan"))))
        self.assertIsNone(bound.faster_than(dict(x_bound=None)))
        # The cell that set its run's ceiling sits at its bound up to rounding: bytes ÷ (bytes ÷ latency).
        nbytes, latency = 9267024629, 847.5863032002954
        at_ceiling = latency / (nbytes / (nbytes / (latency * 1e6) * 1e6))
        self.assertLess(at_ceiling, 1.0)
        self.assertIsNone(bound.faster_than(dict(x_bound=at_ceiling, x_driver_bound=at_ceiling)))


def device_and_uvm_cells(db, device_ms, device, **uvm):
    """A `device` cell of the workload `device` (fields) taking `device_ms`, and a uvm cell of each
    workload in `uvm` (name: fields) taking 900 ms, streaming 4 GB of its 8 GB of weights at a 50 %
    budget over the run's 25 GB/s link: 160 ms. Their ids by name, the device cell's "device"."""
    db.set_run(h2d_gbps=25.0)
    common = dict(budget="50%", budget_bytes=4 * GB, weight_bytes=8 * GB, oversubscription=2.0, streamed_bytes=4 * GB)
    ids = {"device": gpu_cell(db, "device", latency_median_ms=device_ms, **dict(common, streamed_bytes=0, **device))}
    for name, fields in uvm.items():
        ids[name] = gpu_cell(db, "uvm", latency_median_ms=900.0, **common, **fields)
    return ids


class WorkloadFromAxesTest(DbTest):
    """The bound's `device` reference shares every workload parameter the database's `axes` table
    names: a dropout-0.1 uvm cell is not set against the faster dropout-0 device cell (the bound once
    left dropout out), while one of the same dropout is its reference."""

    @classmethod
    def build(cls, db):
        return device_and_uvm_cells(db, 100.0, dict(dropout=0.0), uvm=dict(dropout=0.1), uvm0=dict(dropout=0.0))

    def test_dropout_is_part_of_the_workload(self):
        self.assertIn("dropout", ResultsDb(self.path).axes.workload)
        cells = ResultsDb(self.path).cells().set_index("cell_id")
        # link 4e9 / 25e9 = 160 ms; the dropout-0 device cell's 100 ms is no reference for dropout 0.1.
        self.assertAlmostEqual(cells.loc[self.ids["uvm"], "bound_ms"], 160.0)
        self.assertAlmostEqual(cells.loc[self.ids["uvm0"], "bound_ms"], 160.0)
        with sqlite3.connect(self.path) as con:
            con.execute("UPDATE cells SET latency_median_ms = 300.0 WHERE cell_id = ?", (self.ids["device"],))
        cells = ResultsDb(self.path).cells().set_index("cell_id")
        self.assertAlmostEqual(cells.loc[self.ids["uvm"], "bound_ms"], 160.0)
        self.assertAlmostEqual(cells.loc[self.ids["uvm0"], "bound_ms"], 300.0)
        with sqlite3.connect(self.path) as con:
            con.execute("UPDATE cells SET latency_median_ms = 100.0 WHERE cell_id = ?", (self.ids["device"],))

    def test_older_files_are_described_by_the_constants(self):
        older = Axes(OLDER_AXES)
        self.assertIn("dropout", older.workload)
        self.assertNotIn("launch", older.workload)  # a placement: the fastest device cell over it is the reference
        self.assertEqual(older.model_shape, ("n_layer", "n_embd", "n_head", "vocab_size", "max_positions"))
        self.assertEqual(older.fill_missing({"model": "tiny"})["launch"], "kernels")


class ModelFieldsTest(DbTest):
    """The model's kv heads and MLP width in effect are columns of the model's shape (schema 25), so
    the bound's `device` reference is a cell of the same model: of a custom model redefined with other
    kv heads under the same name, the other definition's device cell is no reference."""

    @classmethod
    def build(cls, db):
        return device_and_uvm_cells(db, 300.0, dict(model="m", n_kv_head=4), uvm_grouped=dict(model="m", n_kv_head=2),
                                    uvm=dict(model="m", n_kv_head=4))

    def test_the_model_shape_has_the_counts_in_effect(self):
        axes = ResultsDb(self.path).axes
        self.assertEqual(axes.model_shape, ("n_layer", "n_embd", "n_head", "vocab_size", "max_positions", "family",
                                            "n_kv_head", "ffn_hidden"))
        self.assertIn("n_kv_head", axes.workload)
        self.assertNotIn("n_kv_head", axes.parameters)  # the model brings it; no matrix sets it
        # The template's tiny cell: 4 heads, hidden 64, neither count in its text.
        with sqlite3.connect(template_db()) as con:
            self.assertEqual(con.execute("SELECT n_head, n_kv_head, ffn_hidden FROM cells").fetchall(), [(4, 4, 256)])

    def test_the_device_reference_has_the_same_kv_heads(self):
        cells = ResultsDb(self.path).cells().set_index("cell_id")
        # link 4e9 / 25e9 = 160 ms; the 4-kv-head device cell's 300 ms bounds its own definition only.
        self.assertAlmostEqual(cells.loc[self.ids["uvm"], "bound_ms"], 300.0)
        self.assertAlmostEqual(cells.loc[self.ids["uvm_grouped"], "bound_ms"], 160.0)


# --- the bound fixture: scripts/bench/backends_table.py and the report's bound columns --------------

class BoundFixture(DbTest):
    """One run with a 25 GB/s link probe. The fp32 1×8 workload has a device cell (100 ms); the
    fp16 one has only an `invalid` device cell (500 ms), which must not serve as its reference."""

    @classmethod
    def build(cls, db):
        db.set_run(h2d_gbps=25.0, d2h_gbps=24.0, gpu_name="Fixture GPU", gpu_driver="CUDA 13.0",
                   gpu_memory_bytes=80 * GIB)
        # prefetch75 (prefetch off, evict migrate) faults weights in and migrates them out:
        # max(2e9 / 50e9, 2e9 / 40e9) = 50 ms < device 100 ms: driver bound 100, 150 / 100 = 1.5
        for operation, gbps in (("fault_in", 50.0), ("evict_to_host", 40.0), ("prefetch_to_gpu", 45.0)):
            db.insert("managed_probe", dict(run_id=1, operation=operation, bytes=512 << 20, calls=5, gbps=gbps,
                                            host_ms=1.0))
        ids = {}
        # Memory: device, copy25 and copy50 use 600, 598 and 602 MiB beyond their allocations (the CUDA
        # context and libraries); each prediction adds the largest of the other two; prefetch75 (UVM) adds 602.
        ids["device"] = gpu_cell(db, "device", budget="100%", budget_bytes=8 * GB, weight_bytes=8 * GB,
                                 oversubscription=1.0, resident_bytes=8 * GB, streamed_bytes=0,
                                 latency_median_ms=100.0, latency_p10_ms=95.0, latency_p90_ms=110.0,
                                 device_weight_bytes=8 * GB, activation_bytes=100 * MIB,
                                 device_used_bytes=8 * GB + 700 * MIB, predicted_alloc_bytes=8 * GB + 100 * MIB)
        # link 6e9 / 25e9 = 240 ms > device 100 ms: bound 240, 300 / 240 = 1.25
        ids["copy25"] = gpu_cell(db, "explicit-copy", budget="25%", budget_bytes=2 * GB, weight_bytes=8 * GB,
                                 oversubscription=4.0, resident_bytes=2 * GB, streamed_bytes=6 * GB,
                                 latency_median_ms=300.0, latency_p10_ms=270.0, latency_p90_ms=330.0,
                                 streamed_gbps=20.0, tokens_per_s=26.666, device_used_bytes=3 * GIB,
                                 device_weight_bytes=2 * GIB, activation_bytes=1 * GIB - 598 * MIB,
                                 predicted_alloc_bytes=3 * GIB - 598 * MIB + 10 * MIB)  # 10 MiB over
        # link 4e9 / 25e9 = 160 ms: bound 160, 240 / 160 = 1.5
        ids["copy50"] = gpu_cell(db, "explicit-copy", budget="50%", budget_bytes=4 * GB, weight_bytes=8 * GB,
                                 oversubscription=2.0, resident_bytes=4 * GB, streamed_bytes=4 * GB,
                                 latency_median_ms=240.0, latency_p10_ms=200.0, latency_p90_ms=280.0,
                                 device_weight_bytes=4 * GB, activation_bytes=100 * MIB,
                                 device_used_bytes=4 * GB + 702 * MIB, predicted_alloc_bytes=4 * GB + 100 * MIB)
        # link 2e9 / 25e9 = 80 ms < device 100 ms: bound 100, 150 / 100 = 1.5
        ids["prefetch75"] = gpu_cell(db, "uvm-prefetch", budget="75%", budget_bytes=6 * GB, weight_bytes=8 * GB,
                                     oversubscription=8 / 6, resident_bytes=6 * GB, streamed_bytes=2 * GB,
                                     latency_median_ms=150.0, latency_p10_ms=140.0, latency_p90_ms=180.0,
                                     streamed_gbps=13.333, um_htod_bytes=40_000_000, device_used_bytes=2 * GIB,
                                     predicted_alloc_bytes=2 * GIB - 602 * MIB - 64 * MIB,
                                     predicted_peak_bytes=2 * GIB + 20 * MIB,  # 20 MiB over
                                     trace_iterations=4)
        # fp16: link 1e9 / 25e9 = 40 ms, no valid fp16 device cell: bound 40, 70 / 40 = 1.75
        ids["fp16"] = gpu_cell(db, "explicit-copy", dtype="fp16", budget="75%", budget_bytes=3 * GB,
                               weight_bytes=4 * GB, oversubscription=4 / 3, resident_bytes=3 * GB,
                               streamed_bytes=1 * GB, latency_median_ms=70.0, latency_p10_ms=60.0, latency_p90_ms=80.0,
                               trace_iterations=3)
        ids["invalid_device_fp16"] = gpu_cell(
            db, "device", dtype="fp16", status="invalid", reason="output outside tolerance", budget="100%",
            budget_bytes=4 * GB, weight_bytes=4 * GB, oversubscription=1.0, resident_bytes=4 * GB, streamed_bytes=0,
            latency_median_ms=500.0, latency_p10_ms=500.0, latency_p90_ms=500.0)
        ids["failed"] = gpu_cell(db, "explicit-copy", status="failed", reason="crashed", budget="50%",
                                 budget_bytes=4 * GB, weight_bytes=8 * GB, oversubscription=2.0, streams=2,
                                 latency_median_ms=None, latency_p10_ms=None, latency_p90_ms=None)
        ids["host"] = db.add_cell(backend="host", status="ok", latency_median_ms=5.0, latency_p10_ms=4.0,
                                  latency_p90_ms=6.0)
        cls.add_um_events(db, ids)
        return ids

    @classmethod
    def add_um_events(cls, db, ids):
        """prefetch75: 2 traced iterations stored (though trace_iterations says 4); fp16: none stored,
        trace_iterations 3. Bytes and faults below are totals over those iterations."""
        c = ids["prefetch75"]
        for i in range(2):
            db.insert("iterations", dict(cell_id=c, phase="traced", iteration=i, latency_ms=160.0))
        db.add_copy(c, 10, 20, 11, 30_000_000, cause=2)   # host→device, page fault
        db.add_copy(c, 30, 40, 11, 10_000_000, cause=2)
        db.add_copy(c, 50, 60, 11, 6_000_000, cause=3)    # host→device, speculative prefetch
        db.add_copy(c, 70, 80, 12, 8_000_000, cause=4)    # device→host, eviction
        db.add_copy(c, 90, 99, 1, 99_000_000)             # an explicit copy: not UM traffic
        for faults in (5, 7):
            db.insert("CUDA_UM_GPU_PAGE_FAULT_EVENTS", dict(cell_id=c, start=1, end=2, deviceId=0, address=4096,
                                                            numberOfPageFaults=faults, faultAccessType=1))
        for t in range(3):
            db.insert("CUDA_UM_CPU_PAGE_FAULT_EVENTS", dict(cell_id=c, start=t, address=8192))
        db.insert("CUDA_UM_CPU_PAGE_FAULT_EVENTS", dict(cell_id=ids["fp16"], start=1, address=8192))


class BackendsTableTest(BoundFixture):
    """scripts/bench/backends_table.py: the table in docs/benchmarks.md."""

    COLUMNS = ["model", "dtype", "b×s", "backend", "prefetch", "streams", "budget", "resident", "evict", "launch",
               "streamed GB", "median ms", "p10–p90 ms", "bound ms", "× bound", "driver bound ms", "× driver bound",
               "link GB/s", "rel err"]

    # (backend, dtype, budget): streamed GB, median, p10–p90, bound ms, × bound, driver bound ms,
    # × driver bound, link GB/s
    EXPECTED = {
        ("device", "fp32", "100%"): ("0.00", "100.0", "95.0–110.0", "100.0", "1.00", "-", "-", "-"),
        ("explicit-copy", "fp32", "25%"): ("6.00", "300.0", "270.0–330.0", "240.0", "1.25", "-", "-", "20.0"),
        ("explicit-copy", "fp32", "50%"): ("4.00", "240.0", "200.0–280.0", "160.0", "1.50", "-", "-", "-"),
        ("uvm-prefetch", "fp32", "75%"): ("2.00", "150.0", "140.0–180.0", "100.0", "1.50", "100.0", "1.50", "13.3"),
        ("explicit-copy", "fp16", "75%"): ("1.00", "70.0", "60.0–80.0", "40.0", "1.75", "-", "-", "-"),
    }
    CHECKED = ["streamed GB", "median ms", "p10–p90 ms", "bound ms", "× bound", "driver bound ms", "× driver bound",
               "link GB/s"]

    def script(self, *args):
        done = subprocess.run([sys.executable, str(BACKENDS_TABLE), *args], capture_output=True, text=True,
                              timeout=120, cwd=tempfile.gettempdir())
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout

    def markdown_rows(self, out):
        lines = out.splitlines()
        self.assertEqual(lines[0], "| " + " | ".join(self.COLUMNS) + " |")
        self.assertEqual(lines[1], "|" + "---|" * len(self.COLUMNS))
        rows = [dict(zip(self.COLUMNS, line[2:-2].split(" | "))) for line in lines[2:] if line.startswith("| ")]
        return {(r["backend"], r["dtype"], r["budget"]): r for r in rows}

    def check(self, rows, expected):
        self.assertEqual(sorted(rows), sorted(expected))  # host, failed and invalid cells are left out
        for key, values in expected.items():
            self.assertEqual([rows[key][c] for c in self.CHECKED], list(values), key)
            self.assertEqual(rows[key]["b×s"], "1×8")
            self.assertEqual(rows[key]["model"], "tiny")

    def test_markdown(self):
        self.check(self.markdown_rows(self.script(self.path, "--markdown")), self.EXPECTED)

    def test_aligned_text(self):
        lines = self.script(self.path).splitlines()
        self.assertEqual(lines[0].split(), " ".join(self.COLUMNS).split())
        rows = {}
        for line in lines[1:]:
            values = line.split()  # no value has a space
            self.assertEqual(len(values), len(self.COLUMNS), line)
            r = dict(zip(self.COLUMNS, values))
            rows[(r["backend"], r["dtype"], r["budget"])] = r
        self.check(rows, self.EXPECTED)

    def test_device_cell_of_another_database_is_the_reference(self):
        """A second database holding an ok fp16 device cell (50 ms): the fp16 cell's bound becomes
        max(40, 50) = 50 ms and its ratio 70 / 50 = 1.40."""
        db = FixtureDb(self.folder, "second.db")
        db.set_run(h2d_gbps=None, gpu_name="Fixture GPU")
        gpu_cell(db, "device", dtype="fp16", budget="100%", budget_bytes=4 * GB, weight_bytes=4 * GB,
                 oversubscription=1.0, resident_bytes=4 * GB, streamed_bytes=0, latency_median_ms=50.0,
                 latency_p10_ms=45.0, latency_p90_ms=55.0)
        db.close()
        expected = dict(self.EXPECTED)
        expected[("explicit-copy", "fp16", "75%")] = ("1.00", "70.0", "60.0–80.0", "50.0", "1.40", "-", "-", "-")
        expected[("device", "fp16", "100%")] = ("0.00", "50.0", "45.0–55.0", "50.0", "1.00", "-", "-", "-")
        self.check(self.markdown_rows(self.script(self.path, db.path, "--markdown")), expected)


    def test_best_keeps_the_fastest_setting_of_each_budget(self):
        """A second database with two more explicit-copy fp32 25 % cells, 350 ms (2 streams) and 280 ms
        (3 streams): --best keeps the 280 ms one (bound 240, 280 / 240 = 1.17) and every other row."""
        db = FixtureDb(self.folder, "settings.db")
        db.set_run(h2d_gbps=25.0, gpu_name="Fixture GPU")
        for median, streams in ((350.0, 2), (280.0, 3)):
            gpu_cell(db, "explicit-copy", budget="25%", budget_bytes=2 * GB, weight_bytes=8 * GB, oversubscription=4.0,
                     resident_bytes=2 * GB, streamed_bytes=6 * GB, streams=streams, latency_median_ms=median,
                     latency_p10_ms=median, latency_p90_ms=median)
        db.close()
        rows = self.markdown_rows(self.script(self.path, db.path, "--markdown", "--best"))
        expected = dict(self.EXPECTED)
        expected[("explicit-copy", "fp32", "25%")] = ("6.00", "280.0", "280.0–280.0", "240.0", "1.17", "-", "-", "-")
        self.check(rows, expected)
        self.assertEqual(rows[("explicit-copy", "fp32", "25%")]["streams"], "3")

    def test_best_takes_each_settings_median_repeat(self):
        """Three repeats of explicit-copy fp32 25 % with 3 streams (200, 260 and 300 ms) against one
        cell with 2 streams (270 ms): the 3-stream setting's median repeat, 260 ms, is the fastest.
        With only two repeats (200 and 300 ms) the slower one stands for the setting, and 270 wins."""
        def database(name, medians):
            db = FixtureDb(self.folder, name)
            db.set_run(h2d_gbps=25.0, gpu_name="Fixture GPU")
            for repeat, median in enumerate(medians, start=1):
                gpu_cell(db, "explicit-copy", budget="25%", budget_bytes=2 * GB, weight_bytes=8 * GB, oversubscription=4.0,
                         resident_bytes=2 * GB, streamed_bytes=6 * GB, streams=3, repeat=repeat,
                         latency_median_ms=median, latency_p10_ms=median, latency_p90_ms=median)
            gpu_cell(db, "explicit-copy", budget="25%", budget_bytes=2 * GB, weight_bytes=8 * GB, oversubscription=4.0,
                     resident_bytes=2 * GB, streamed_bytes=6 * GB, streams=2, latency_median_ms=270.0,
                     latency_p10_ms=270.0, latency_p90_ms=270.0)
            db.close()
            return self.markdown_rows(self.script(self.path, db.path, "--markdown", "--best"))
        three = database("three.db", (300.0, 200.0, 260.0))[("explicit-copy", "fp32", "25%")]
        self.assertEqual((three["streams"], three["median ms"]), ("3", "260.0"))
        two = database("two.db", (300.0, 200.0))[("explicit-copy", "fp32", "25%")]
        self.assertEqual((two["streams"], two["median ms"]), ("2", "270.0"))

    def test_launch_column_and_databases_before_it(self):
        """A uvm-prefetch cell that launched graphs, faster than the fixture's (120 against 150 ms):
        --best keeps it and says so; a database from before schema 10 (no launch column) reads as
        kernels."""
        db = FixtureDb(self.folder, "graphs.db")
        db.set_run(h2d_gbps=15.0, gpu_name="Fixture GPU")
        gpu_cell(db, "uvm-prefetch", budget="75%", budget_bytes=6 * GB, weight_bytes=8 * GB, oversubscription=4 / 3,
                 resident_bytes=6 * GB, streamed_bytes=2 * GB, prefetch="1", launch="graphs",
                 latency_median_ms=120.0, latency_p10_ms=110.0, latency_p90_ms=130.0)
        db.close()
        out = self.script(self.path, db.path, "--markdown", "--best")
        rows = self.markdown_rows(out)
        self.assertEqual(rows[("uvm-prefetch", "fp32", "75%")]["launch"], "graphs")
        # Its run's link: 2e9 / 15e9 = 133.3 ms, above its 120 ms: 120 / 133.3 = 0.90, flagged and counted.
        self.assertEqual(rows[("uvm-prefetch", "fp32", "75%")]["× bound"], "0.90!")
        self.assertEqual(out.splitlines()[-1], "! 1 row(s) faster than a bound (latency ÷ bound below 1): a bound is a "
                                               "floor, so the bound or the measurement is wrong there")
        self.assertEqual(rows[("uvm-prefetch", "fp32", "75%")]["median ms"], "120.0")
        old = os.path.join(self.folder, "v9.db")
        shutil.copy(self.path, old)
        con = sqlite3.connect(old)
        # As version 9 wrote it: no launch column, and no description of its columns.
        con.executescript("ALTER TABLE cells DROP COLUMN launch; DROP TABLE axes; DROP TABLE measures;"
                          "UPDATE schema_info SET version = 9")
        con.close()
        rows = self.markdown_rows(self.script(old, "--markdown"))
        self.check(rows, self.EXPECTED)
        self.assertEqual({r["launch"] for r in rows.values()}, {"kernels"})


class TempoStudyOffloadTest(DbTest):
    """scripts/bench/tempo_study.py's table of the cells whose AdamW runs on the host: each term of
    the bound, the dominant one, and, where the step clips, the backward plus the host update."""

    @classmethod
    def build(cls, db):
        # 25 GB/s each way; the host update's streams at 30 GB/s (the triad's 20 set aside).
        db.set_run(h2d_gbps=25.0, d2h_gbps=25.0, host_memory_gbps=20.0, host_update_gbps=30.0)
        train = dict(mode="train", optimizer="host", model="gpt3_6.7b", dtype="bf16", batch=1, seq=1024,
                     n_params=1_500_000_000, budget="25%", streamed_bytes=5 * GB, link_to_device_bytes=10 * GB,
                     link_to_host_bytes=5 * GB, forward_ms=1500.0, optimizer_ms=10.0)
        return {"clipped": gpu_cell(db, "explicit-copy", max_grad_norm=1.0, latency_median_ms=1800.0,
                                    backward_ms=250.0, **train),
                "unclipped": gpu_cell(db, "explicit-copy", max_grad_norm=0.0, latency_median_ms=1650.0,
                                      backward_ms=300.0, **train),
                # Its own state measured at 25 GB/s where it lay: its host update, 45e9 B / 25 GB/s.
                "own rate": gpu_cell(db, "explicit-copy", max_grad_norm=0.0, latency_median_ms=1890.0,
                                     backward_ms=300.0, host_state_gbps=25.0, **dict(train, budget="50%")),
                # With the link's copies beside it too: 45e9 + 15e9 B through the host's memory at 30 GB/s.
                "shared rate": gpu_cell(db, "explicit-copy", max_grad_norm=0.0, latency_median_ms=2100.0,
                                        backward_ms=300.0, host_state_gbps=25.0, host_shared_gbps=30.0,
                                        host_adamw_alone_ms=1600.0, host_adamw_ms=1750.0, host_arrays_gbps=24.0,
                                        **dict(train, budget="90%"))}

    def rows(self, title="Training with AdamW on the host"):
        """The rows of the table under `title`, by (budget, max_grad_norm), and the whole output."""
        done = subprocess.run([sys.executable, str(TEMPO_STUDY), self.path], capture_output=True, text=True,
                              timeout=120, cwd=tempfile.gettempdir())
        self.assertEqual(done.returncode, 0, done.stderr)
        lines = done.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith(title))
        header = [h.strip() for h in lines[start + 2].strip("|").split("|")]
        body = itertools.takewhile(lambda line: line.startswith("| "), lines[start + 4:])
        table = [dict(zip(header, (v.strip() for v in line.strip("|").split("|")))) for line in body]
        return {(r["budget"], float(r["max_grad_norm"])): r for r in table}, done.stdout

    def test_adamw_alone_and_beside_the_step(self):
        by_cell, _ = self.rows("AdamW on the host, alone and beside the step")
        # Only the cell that measured it (schema 32); 45e9 B in 1600 ms alone, 28.1 GB/s; in 1750 ms
        # beside the step, 25.7 GB/s; the step's 2100 ms less those 1750.
        self.assertEqual(set(by_cell), {("90%", 0.0)})
        row = by_cell[("90%", 0.0)]
        self.assertEqual((row["AdamW alone"], row["AdamW in the step"], row["step − AdamW"]),
                         ("1,600", "1,750", "350"))
        self.assertEqual((row["alone GB/s"], row["in the step GB/s"]), ("28.1", "25.7"))
        self.assertEqual((row["state GB/s"], row["arrays GB/s"], row["shared GB/s"]), ("25.0", "24.0", "30.0"))
        # The factors: 1600 ms against the arrays' 45e9 B / 24 GB/s = 1875 ms, 0.85; 1750 / 1600 = 1.09;
        # 2100 / 1750 = 1.20. Their product, 1.12, is the step over the host update term, 2100 / 1875.
        self.assertEqual((row["alone ÷ arrays' time"], row["in the step ÷ alone"], row["step ÷ AdamW in the step"]),
                         ("0.85", "1.09", "1.20"))

    def test_the_bound_is_the_host_update_at_the_rate_of_its_streams(self):
        by_cell, out = self.rows()
        self.assertEqual(set(by_cell), {("25%", 0.0), ("25%", 1.0), ("50%", 0.0), ("90%", 0.0)})
        rows = {clip: row for (budget, clip), row in by_cell.items() if budget == "25%"}
        for row in rows.values():
            self.assertEqual(row["state GB/s"], "–")
            # link: max(10e9 / 25e9, 5e9 / 25e9) = 400 ms; host update: 1.5e9 · 30 B / 30 GB/s = 1500 ms.
            self.assertEqual(row["link"], "400")
            self.assertEqual(row["host update"], "1,500")
            self.assertEqual(row["bound"], "1,500")
            self.assertEqual(row["dominant term"], "host update")
        self.assertEqual(rows[1.0]["step ÷ bound"], "1.20")  # 1800 / 1500
        self.assertEqual(rows[0.0]["step ÷ bound"], "1.10")  # 1650 / 1500
        # Clipped: the update waits for the backward, 250 + 1500 = 1750 ms, 1800 / 1750 = 1.03.
        self.assertEqual(rows[1.0]["backward + host update"], "1,750")
        self.assertEqual(rows[1.0]["step ÷ that"], "1.03")
        # That floor over the bound, 1750 / 1500: no schedule takes the clipped step below 1.17 × it.
        self.assertEqual(rows[1.0]["that ÷ bound"], "1.17")
        # Unclipped: the backward starts the update; no such floor.
        self.assertEqual(rows[0.0]["backward + host update"], "–")
        self.assertEqual(rows[0.0]["that ÷ bound"], "–")
        self.assertIn("Run 1: the host update's streams 30.0 GB/s moved, the STREAM triad 20.0 GB/s counted.", out)
        # A cell with its own state's rate: 1.5e9 · 30 B / 25 GB/s = 1800 ms, the run's probe set aside.
        own = by_cell[("50%", 0.0)]
        self.assertEqual((own["state GB/s"], own["host update"], own["bound"]), ("25.0", "1,800", "1,800"))
        self.assertEqual((own["shared GB/s"], own["host memory"]), ("–", "–"))
        # Its update arrays at 24 GB/s, before its state's 25: 45e9 B / 24 GB/s = 1875 ms. The host
        # memory term: 60e9 B / 30 GB/s = 2000 ms, above that: the bound, 2100 / 2000 = 1.05; without
        # it the bound is 1875 ms, 2100 / 1875 = 1.12.
        shared = by_cell[("90%", 0.0)]
        self.assertEqual((shared["state GB/s"], shared["arrays GB/s"], shared["host update"]),
                         ("25.0", "24.0", "1,875"))
        self.assertEqual((shared["shared GB/s"], shared["host memory"], shared["bound"]), ("30.0", "2,000", "2,000"))
        self.assertEqual(shared["dominant term"], "host memory")
        self.assertEqual((shared["step ÷ bound"], shared["step ÷ bound without host memory"]), ("1.05", "1.12"))
        self.assertEqual(own["step ÷ bound without host memory"], "1.05")  # 1890 / 1800
        self.assertEqual(own["step ÷ bound"], "1.05")  # 1890 / 1800


class ReportBoundTest(BoundFixture):
    """The report's bound_ms and x_bound columns (analysis/results_db.py), and the figures and table built on them."""

    def cells(self):
        return ResultsDb(self.path).cells().set_index("cell_id")

    def test_bound_and_ratio(self):
        cells = self.cells()
        expected = {"device": (100.0, 1.0), "copy25": (240.0, 1.25), "copy50": (160.0, 1.5),
                    "prefetch75": (100.0, 1.5), "fp16": (40.0, 1.75)}
        for name, (bound_ms, x_bound) in expected.items():
            self.assertAlmostEqual(cells.loc[self.ids[name], "bound_ms"], bound_ms, msg=name)
            self.assertAlmostEqual(cells.loc[self.ids[name], "x_bound"], x_bound, msg=name)
        for name in ("invalid_device_fp16", "failed", "host"):  # not measured GPU cells: no bound
            self.assertTrue(math.isnan(cells.loc[self.ids[name], "bound_ms"]), name)
            self.assertTrue(math.isnan(cells.loc[self.ids[name], "x_bound"]), name)

    def test_driver_bound_of_the_uvm_cell_only(self):
        cells = self.cells()
        self.assertAlmostEqual(cells.loc[self.ids["prefetch75"], "driver_bound_ms"], 100.0)
        self.assertAlmostEqual(cells.loc[self.ids["prefetch75"], "x_driver_bound"], 1.5)
        for name in ("device", "copy25", "copy50", "fp16", "failed", "host"):
            self.assertTrue(math.isnan(cells.loc[self.ids[name], "driver_bound_ms"]), name)
        points = oversubscription.driver_slowdown(report_data(self.path).ok).set_index("cell_id")
        self.assertEqual(list(points.index), [self.ids["prefetch75"]])
        self.assertEqual(tuple(points.loc[self.ids["prefetch75"], ["x_driver_bound", "lo", "hi"]]), (1.5, 1.4, 1.8))
        # One budget of one UVM backend: no line to draw, and the figure says why.
        with self.assertRaises(Skip) as skipped:
            driver_oversubscription.render(report_data(self.path))
        self.assertIn("two or more budgets", str(skipped.exception))

    def test_driver_bound_of_a_slower_driver(self):
        """Rates below the device term: the driver term sets the bound. max(2e9 / 5e9, 2e9 / 10e9) = 400 ms;
        the cell's own 2e9 B / 0.9 s = 2.2 GB/s raises neither ceiling."""
        db = FixtureDb(self.folder, "slow_driver.db")
        db.set_run(h2d_gbps=25.0)
        for operation, gbps in (("prefetch_to_gpu", 5.0), ("evict_to_host", 10.0)):
            db.insert("managed_probe", dict(run_id=1, operation=operation, bytes=512 << 20, calls=5, gbps=gbps,
                                            host_ms=1.0))
        gpu_cell(db, "device", streamed_bytes=0, latency_median_ms=100.0)
        uvm = gpu_cell(db, "uvm-prefetch", prefetch="jit", streamed_bytes=2 * GB, latency_median_ms=900.0)
        db.close()
        cells = ResultsDb(db.path).cells().set_index("cell_id")
        self.assertAlmostEqual(cells.loc[uvm, "driver_bound_ms"], 400.0)
        self.assertAlmostEqual(cells.loc[uvm, "x_driver_bound"], 2.25)
        self.assertEqual(cells.loc[uvm, "driver_bound_from"], "prefetch_to_gpu (probe)")
        self.assertAlmostEqual(cells.loc[uvm, "bound_ms"], 100.0)  # the link's: 2e9 / 25e9 = 80 < device 100

    def test_no_link_probe_leaves_the_device_term(self):
        """Without h2d_gbps (a run that did not probe the link) the bound is the device latency alone:
        100 ms for every fp32 cell, none for fp16."""
        db = FixtureDb(self.folder, "no_link.db")
        db.set_run(h2d_gbps=None)
        device = gpu_cell(db, "device", streamed_bytes=0, latency_median_ms=100.0)
        copy = gpu_cell(db, "explicit-copy", streamed_bytes=6 * GB, latency_median_ms=300.0)
        fp16 = gpu_cell(db, "explicit-copy", dtype="fp16", streamed_bytes=1 * GB, latency_median_ms=70.0)
        db.close()
        cells = ResultsDb(db.path).cells().set_index("cell_id")
        self.assertAlmostEqual(cells.loc[device, "bound_ms"], 100.0)
        self.assertAlmostEqual(cells.loc[copy, "bound_ms"], 100.0)
        self.assertAlmostEqual(cells.loc[copy, "x_bound"], 3.0)  # 300 / 100
        self.assertTrue(math.isnan(cells.loc[fp16, "bound_ms"]))

    def test_slowdown_points(self):
        """Slowdown figure: latency ÷ bound of the streamed cells at the median, p10 and p90."""
        points = oversubscription.slowdown(report_data(self.path).ok).set_index("cell_id")
        expected = {  # x_bound, lo = p10 / bound, hi = p90 / bound
            "copy25": (1.25, 270 / 240, 330 / 240),       # 1.125, 1.375
            "copy50": (1.5, 200 / 160, 280 / 160),        # 1.25, 1.75
            "prefetch75": (1.5, 1.4, 1.8),                # 140/100, 180/100
            "fp16": (1.75, 1.5, 2.0),                     # 60/40, 80/40
        }
        self.assertEqual(sorted(points.index), sorted(self.ids[n] for n in expected))  # no device, host cell
        for name, values in expected.items():
            got = tuple(points.loc[self.ids[name], ["x_bound", "lo", "hi"]])
            for g, e in zip(got, values):
                self.assertAlmostEqual(g, e, msg=name)

    def test_slowdown_line_spans_the_budgets(self):
        """The two fp32 explicit-copy budgets form one line over oversubscription 2 and 4 (budget is
        fixed by the swept ratio, so it must not split the line); the fp16 cell is a different workload."""
        points = oversubscription.slowdown(report_data(self.path).ok)
        panels = series(points, Axes(OLDER_AXES), Swept("oversubscription", "oversubscription"), ("budget",))
        self.assertEqual([(title, left_out, names) for title, _, left_out, names in panels], [("explicit-copy", 0, [])])
        (label, line), = panels[0][1]
        line = line.sort_values("oversubscription")
        self.assertEqual(list(line["oversubscription"]), [2.0, 4.0])
        self.assertEqual(list(line["x_bound"]), [1.5, 1.25])
        self.assertEqual(list(line["dtype"]), ["fp32", "fp32"])

    def test_lines_left_out_name_what_the_drawn_ones_share(self):
        """Ten lines in one panel, nine of model tiny (streams 1-9) and one of tiny_odd: the eight drawn
        are all tiny, so the title says so, the labels name only streams, and two are left out."""
        rows = []
        for model, streams in [("tiny", s) for s in range(1, 10)] + [("tiny_odd", 1)]:
            for budget in ("25%", "50%"):
                row = {p: "x" for p in Axes(OLDER_AXES).parameters}
                row.update(model=model, backend="explicit-copy", streams=streams, budget=budget, y=1.0)
                rows.append(row)
        panels = series(pd.DataFrame(rows), Axes(OLDER_AXES), Swept("budget", "budget", order=str), ())
        (title, lines, left_out, names), = panels
        self.assertEqual(title, "explicit-copy: model=tiny")
        self.assertEqual([label for label, _ in lines], [f"streams={s}" for s in range(1, 9)])
        self.assertEqual(left_out, 2)
        self.assertEqual(names, ["streams"])

    def test_bandwidth_points(self):
        """Link figure: streamed bytes ÷ median latency (achieved) and ÷ bound (attainable), in GB/s."""
        points = bandwidth.points(report_data(self.path).ok).set_index("cell_id")
        expected = {  # streamed GB, achieved, attainable
            "copy25": (6.0, 20.0, 25.0),                  # 6e9 B / 300 ms, 6e9 / 240 ms
            "copy50": (4.0, 4 / 0.24, 25.0),              # 16.67, 4e9 / 160 ms
            "prefetch75": (2.0, 2 / 0.15, 20.0),          # 13.33, 2e9 / 100 ms (device-bound)
            "fp16": (1.0, 1 / 0.07, 25.0),                # 14.29, 1e9 / 40 ms
        }
        self.assertEqual(sorted(points.index), sorted(self.ids[n] for n in expected))  # streamed_bytes > 0 only
        for name, values in expected.items():
            got = tuple(points.loc[self.ids[name], ["streamed_gb", "achieved", "attainable"]])
            for g, e in zip(got, values):
                self.assertAlmostEqual(g, e, msg=name)

    def test_cell_table(self):
        """The page's per-cell table: bound and ratio, and the columns shown in another unit than stored."""
        db = ResultsDb(self.path)
        headings, rows = cell_table(db.cells(), db.axes)
        names = [h for h, _ in headings]
        by_id = {r[names.index("cell")].text: dict(zip(names, r)) for r in rows}
        copy25 = by_id[str(self.ids["copy25"])]
        self.assertEqual(copy25["bound ms"].text, "240")
        self.assertEqual(copy25["× bound"].text, "1.25")
        self.assertEqual(copy25["weights ÷ budget"].text, "4.00")
        self.assertEqual(copy25["link GB/s"].text, "20.0")
        self.assertEqual(copy25["tokens/s"].text, "27")
        self.assertEqual(copy25["device used MiB"].text, "3,072")  # 3 GiB / 2^20
        self.assertEqual(copy25["device used MiB"].number, 3072)  # what the column sorts by
        prefetch = by_id[str(self.ids["prefetch75"])]
        self.assertEqual(prefetch["UM H→D MB"].text, "40.0")  # 40e6 B / 1e6
        self.assertEqual(prefetch["× bound"].text, "1.50")
        self.assertEqual(prefetch["weights ÷ budget"].text, "1.33")
        self.assertEqual(by_id[str(self.ids["host"])]["bound ms"].text, "–")
        self.assertIsNone(by_id[str(self.ids["host"])]["× bound"].number)

    def test_peak_memory_error(self):
        """Estimator figure: predicted peak = the stored one where there is one (prefetch75), else the
        predicted allocations + the largest fixed cost of the other cells of the GPU (its device cells
        where there are any); error (predicted −
        measured) ÷ measured; the caption names the worst."""
        data = report_data(self.path)
        cells, error = peak_memory.compared(data.ok)
        error = dict(zip(cells["cell_id"], error))
        self.assertEqual(sorted(error), sorted(self.ids[n] for n in ("device", "copy25", "copy50", "prefetch75")))
        self.assertAlmostEqual(error[self.ids["device"]], 2 * MIB / (8 * GB + 700 * MIB))     # + 602, used 600
        # 10 over, + 600 for 598: the device cell's fixed cost, not copy50's 602 (its page tables)
        self.assertAlmostEqual(error[self.ids["copy25"]], 12 * MIB / (3 * GIB))
        self.assertAlmostEqual(error[self.ids["copy50"]], -2 * MIB / (4 * GB + 702 * MIB))    # + 600, used 602
        self.assertAlmostEqual(error[self.ids["prefetch75"]], 20 * MIB / (2 * GIB))           # stored: 20 over
        drawn = peak_memory.render(data)
        plt.close(drawn.figure)
        self.assertIn("(predicted_peak_bytes, 1 cells)", drawn.caption)
        self.assertIn("4 cells, worst error 0.98 %", drawn.caption)

    def test_peak_memory_leaves_out_uvm_cells_without_a_stored_peak(self):
        """A UVM cell's peak holds the managed pages the driver keeps: without the estimator's stored
        peak it has no prediction, while the device cells still lend each other the fixed cost."""
        db = FixtureDb(self.folder, "uvm-unstored.db")
        db.set_run(gpu_name="Fixture GPU", gpu_driver="CUDA 13.0")
        a = gpu_cell(db, "device", device_weight_bytes=GB, activation_bytes=MIB, device_used_bytes=GB + 601 * MIB,
                     predicted_alloc_bytes=GB + MIB)
        b = gpu_cell(db, "device", batch=2, device_weight_bytes=GB, activation_bytes=2 * MIB,
                     device_used_bytes=GB + 602 * MIB, predicted_alloc_bytes=GB + 2 * MIB)
        gpu_cell(db, "uvm-prefetch", device_weight_bytes=GB // 2, activation_bytes=MIB, device_used_bytes=GB + 700 * MIB,
                 predicted_alloc_bytes=GB // 2 + MIB)
        db.close()
        cells, _ = peak_memory.compared(report_data(db.path).ok)
        self.assertEqual(sorted(cells["cell_id"]), sorted([a, b]))

    def test_peak_memory_needs_another_cell_of_the_gpu(self):
        """A database whose only cell with the measured allocations is the cell itself: no prediction."""
        db = FixtureDb(self.folder, "lonely.db")
        db.set_run(gpu_name="Fixture GPU", gpu_driver="CUDA 13.0")
        gpu_cell(db, "device", device_weight_bytes=GB, activation_bytes=MIB, device_used_bytes=GB + 601 * MIB,
                 predicted_alloc_bytes=GB + MIB)
        db.close()
        with self.assertRaises(Skip) as skipped:
            peak_memory.render(report_data(db.path))
        self.assertIn("together with another cell of its GPU", str(skipped.exception))

    def test_peak_memory_prefers_nvml_peak(self):
        """A cell with NVML's peak (gpu_peak_bytes) is measured by it, not by the used memory after its
        first iteration, for its own error and for the fixed cost it lends the other cells."""
        db = FixtureDb(self.folder, "nvml.db")
        db.set_run(gpu_name="Fixture GPU", gpu_driver="CUDA 13.0")
        a = gpu_cell(db, "device", device_weight_bytes=GB, activation_bytes=MIB, device_used_bytes=GB + 901 * MIB,
                     gpu_peak_bytes=GB + 501 * MIB, predicted_alloc_bytes=GB + MIB)
        b = gpu_cell(db, "device", batch=2, device_weight_bytes=GB, activation_bytes=2 * MIB,
                     device_used_bytes=GB + 902 * MIB, gpu_peak_bytes=GB + 510 * MIB, predicted_alloc_bytes=GB + 2 * MIB)
        db.close()
        data = report_data(db.path)
        cells, error = peak_memory.compared(data.ok)
        error = dict(zip(cells["cell_id"], error))
        self.assertAlmostEqual(error[a], (GB + MIB + 508 * MIB - (GB + 501 * MIB)) / (GB + 501 * MIB))  # b's fixed: 508
        self.assertAlmostEqual(error[b], (GB + 2 * MIB + 500 * MIB - (GB + 510 * MIB)) / (GB + 510 * MIB))  # a's: 500
        drawn = peak_memory.render(data)
        plt.close(drawn.figure)
        self.assertIn("(gpu_peak_bytes, 2 cells)", drawn.caption)

    def test_scatter_and_bar_figures_say_what_they_hold(self):
        """Titles name the workload of what is drawn (fp16 and fp32 streamed; only fp32 has a memory
        prediction); the UM figure names each traced cell by what tells it from the other (backend,
        dtype, trace_iterations); the ±1 % target lines are in their panel's legend."""
        data = report_data(self.path)
        figures = {m: m.render(data) for m in (um_traffic, peak_memory, bandwidth)}
        for drawn in figures.values():
            self.addCleanup(plt.close, drawn.figure)
        self.assertEqual(suptitle(figures[um_traffic].figure),
                         "tiny fp16/fp32, batch 1 × seq 8\none bar pair per traced cell")
        bottom = figures[um_traffic].figure.axes[-1]
        self.assertEqual(bottom.get_xlabel(), "cell (id, backend, dtype, trace_iterations)")
        self.assertEqual([t.get_text() for t in bottom.get_xticklabels()],
                         [f"#{self.ids['prefetch75']}\nuvm-prefetch\nfp32\n4", f"#{self.ids['fp16']}\nexplicit-copy\nfp16\n3"])
        self.assertEqual(suptitle(figures[peak_memory].figure),
                         "tiny fp32, batch 1 × seq 8\none point per cell, coloured by backend")
        self.assertEqual(legend_texts(figures[peak_memory].figure.axes[1]), ["±1 % target", "no error"])
        self.assertEqual(suptitle(figures[bandwidth].figure),
                         "tiny fp16/fp32, batch 1 × seq 8\none point per cell, coloured by backend")

    def test_um_traffic_per_traced_iteration(self):
        """UM figure: bytes by (direction, cause) and faults, divided by the traced iterations stored
        (2 for prefetch75, although it asked for 4; fp16 stored none and asked for 3)."""
        data = report_data(self.path)
        cells = data.cells.set_index("cell_id")
        c, f = self.ids["prefetch75"], self.ids["fp16"]
        self.assertEqual(um_traffic.traced_cells(data.db), {c, f})
        per_iteration = um_traffic.iterations_per_cell(data.db, cells, [c, f])
        self.assertEqual(per_iteration, {c: 2, f: 3})
        migrations, faults = um_traffic.per_cell(data.db, [c, f], per_iteration)
        got = {(r.cell_id, r.copyKind, r.cause): r.bytes for r in migrations.itertuples()}
        self.assertEqual(got, {(c, 11, 2): 20_000_000,   # (30e6 + 10e6) / 2
                               (c, 11, 3): 3_000_000,    # 6e6 / 2
                               (c, 12, 4): 4_000_000})   # 8e6 / 2; the explicit copy is left out
        self.assertEqual(faults["GPU page faults"], [6.0, 0.0])  # (5 + 7) / 2
        self.assertEqual(faults["CPU page faults"], [1.5, 1 / 3])  # 3 / 2, 1 / 3


# --- the report's normalized and throughput figures -------------------------------------------------

class DriverCeilingTest(DbTest):
    """A run whose uvm cell faulted its weights in faster than the probe's fault_in rate: the ceiling
    is the cell's rate, no UVM cell beats its driver bound, and the page shows the probe's rates beside
    the ceilings. An explicit-copy cell faster than its link bound is flagged (the link probe is no
    ceiling there either). uvm with all weights inside its budget is explained in the captions."""

    @classmethod
    def build(cls, db):
        db.set_run(h2d_gbps=25.0, gpu_name="Fixture GPU")
        for operation, gbps in (("fault_in", 8.0), ("evict_to_host", 10.0), ("prefetch_to_gpu", 40.0)):
            db.insert("managed_probe", dict(run_id=1, operation=operation, bytes=512 << 20, calls=5, gbps=gbps,
                                            host_ms=1.0))
        common = dict(weight_bytes=4 * GB, resident_bytes=0)
        ids = {}
        ids["device"] = gpu_cell(db, "device", budget="100%", budget_bytes=4 * GB, oversubscription=1.0,
                                 streamed_bytes=0, latency_median_ms=100.0, latency_p10_ms=100.0,
                                 latency_p90_ms=100.0, **dict(common, resident_bytes=4 * GB))
        # 4e9 B / 0.25 s = 16 GB/s faulted in, evicting nothing during the forward; 3.6 GB per traced iteration
        ids["uvm100"] = gpu_cell(db, "uvm", budget="100%", budget_bytes=4 * GB, oversubscription=1.0,
                                 streamed_bytes=4 * GB, device_weight_bytes=4 * GB, latency_median_ms=250.0,
                                 latency_p10_ms=240.0, latency_p90_ms=260.0, um_htod_bytes=7_200_000_000,
                                 trace_iterations=2, **common)
        # 13.3 GB/s in; 2e9 B / 0.3 s = 6.7 GB/s evicted, below the probe's 10
        ids["uvm50"] = gpu_cell(db, "uvm", budget="50%", budget_bytes=2 * GB, oversubscription=2.0,
                                streamed_bytes=4 * GB, device_weight_bytes=2 * GB, latency_median_ms=300.0,
                                latency_p10_ms=290.0, latency_p90_ms=310.0, um_htod_bytes=7_400_000_000,
                                trace_iterations=2, **common)
        # link 3e9 / 25e9 = 120 ms > device 100: bound 120, 110 / 120 = 0.92
        ids["copy25"] = gpu_cell(db, "explicit-copy", budget="25%", budget_bytes=1 * GB, oversubscription=4.0,
                                 streamed_bytes=3 * GB, latency_median_ms=110.0, latency_p10_ms=105.0,
                                 latency_p90_ms=115.0, **common)
        # link 2e9 / 25e9 = 80 ms < device 100: bound 100, 130 / 100 = 1.3
        ids["copy50"] = gpu_cell(db, "explicit-copy", budget="50%", budget_bytes=2 * GB, oversubscription=2.0,
                                 streamed_bytes=2 * GB, latency_median_ms=130.0, latency_p10_ms=125.0,
                                 latency_p90_ms=135.0, **common)
        return ids

    def test_the_fastest_cell_sets_the_ceiling_and_no_uvm_cell_beats_it(self):
        cells = ResultsDb(self.path).cells().set_index("cell_id")
        uvm100, uvm50 = self.ids["uvm100"], self.ids["uvm50"]
        # 4e9 / 16e9 = 250 ms (the probe's 8 GB/s would give 500 ms: 0.5 ×)
        self.assertAlmostEqual(cells.loc[uvm100, "driver_bound_ms"], 250.0)
        self.assertAlmostEqual(cells.loc[uvm100, "x_driver_bound"], 1.0)
        # max(4e9 / 16e9, 2e9 / 10e9) = max(250, 200) = 250 ms; 300 / 250 = 1.2
        self.assertAlmostEqual(cells.loc[uvm50, "driver_bound_ms"], 250.0)
        self.assertAlmostEqual(cells.loc[uvm50, "x_driver_bound"], 1.2)
        for c in (uvm100, uvm50):
            self.assertEqual(cells.loc[c, "driver_bound_from"], f"fault_in (cell {uvm100})")
        self.assertEqual(cells.loc[self.ids["copy25"], "faster_than"], "bound")
        for name in ("device", "uvm100", "uvm50", "copy50"):
            self.assertIsNone(cells.loc[self.ids[name], "faster_than"], name)
        results = ResultsDb(self.path)
        headings, rows = cell_table(results.cells(), results.axes)
        column = [h for h, _ in headings].index("faster than")
        self.assertEqual([r[column].text for r in rows], ["–", "–", "–", "bound", "–"])

    def test_captions_flag_the_faster_cell_and_explain_uvm_at_full_budget(self):
        data = report_data(self.path)
        uvm100, uvm50, copy25 = self.ids["uvm100"], self.ids["uvm50"], self.ids["copy25"]
        # 250 / 300 - 1 = -16.7 %; 7.2e9 / 2 traced iterations = 3.60 GB of 4.00 GB
        explained = (f" uvm at budget 100% (cell {uvm100}, 250 ms) is within 17 % of uvm at 50% (cell {uvm50}, 300 ms) "
                     "though its weights fit: they start on the host every iteration, so at 100% it moved 3.60 GB of "
                     "its 4.00 GB of weights host→device per iteration (UM counters, traced iteration), as 3.70 GB at "
                     "50%.")
        caption = oversubscription.render(data).caption
        self.assertIn(" Faster than their bound, which a floor must not allow (look into the bound or the "
                      f"measurement): cell {copy25} (explicit-copy, 25%: 0.92 ×).", caption)
        self.assertTrue(caption.endswith(explained), caption)
        caption = driver_oversubscription.render(data).caption
        self.assertIn("What set the driver bounds of the 2 UVM cells that have one: 2 from fault_in "
                      f"(cell {uvm100}).", caption)
        self.assertNotIn("Faster than", caption)
        self.assertTrue(caption.endswith(explained), caption)
        plt.close("all")

    def test_full_budget_note_without_counters_or_when_not_alike(self):
        ok = report_data(self.path).ok
        axes = ResultsDb(self.path).axes
        uncounted = ok.assign(um_htod_bytes=float("nan"))
        self.assertIn("moved 4.00 GB of its 4.00 GB of weights host→device per iteration (the backend's count), as "
                      "4.00 GB at 50%.", oversubscription.full_budget_note(uncounted, axes))
        # 100 ms against 300: 67 % apart, nothing to explain
        faster = ok.assign(latency_median_ms=ok["latency_median_ms"].where(ok["cell_id"] != self.ids["uvm100"], 100.0))
        self.assertEqual(oversubscription.full_budget_note(faster, axes), "")

    def test_the_summary_script_lists_the_cell_faster_than_its_bound(self):
        """beaten_bounds.py, which `sweetspot summary` runs: only copy25 (110 ms against its 120 ms
        link bound) beats a bound; it has no driver bound. The script runs on Python's standard library
        alone, so that `summary` needs no more than python3."""
        out = os.path.join(self.folder, "beaten.tsv")
        code = "import sys; sys.modules['pandas'] = None; sys.modules['matplotlib'] = None; import beaten_bounds; " \
               "sys.exit(beaten_bounds.main(sys.argv[1:]))"
        subprocess.run([sys.executable, "-c", code, self.path, out], check=True, cwd=REPO / "analysis")
        with open(out, encoding="utf-8") as f:
            self.assertEqual(f.read(), f"{self.ids['copy25']}\tbound\t0.917\t-\n")
        self.assertEqual(beaten_bounds.main([os.path.join(self.folder, "none.db"), out]), 2)

    def test_page_shows_the_probe_rates_beside_the_ceilings(self):
        db = ResultsDb(self.path)
        section = html_page.driver_ceilings_section(db, db.cells())
        body = section[section.index("<tbody>"):]
        cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row) for row in body.split("<tr>")[1:]]
        self.assertEqual(cells, [
            ["1", "fault_in", "8.0", str(self.ids["uvm100"]), "16.0", "16.0", f"cell {self.ids['uvm100']}"],
            ["1", "evict_to_host", "10.0", str(self.ids["uvm50"]), "6.7", "10.0", "probe"],
            ["1", "prefetch_to_gpu", "40.0", "–", "–", "40.0", "probe"]])
        # The page's contents list the section, after the runs it belongs to.
        whole = html_page.page(db, db.runs(), db.cells(), [], [], None, "now")
        nav = whole[whole.index("<nav>"):whole.index("</nav>")]
        self.assertLess(nav.index('href="#runs"'), nav.index('href="#driver-ceilings"'))


class NormalizedTest(DbTest):
    """Performance ÷ baseline: baseline median latency ÷ the variant's, geometric mean over workloads.

    GPU A, device backend, tiny fp32 seq 8:
        batch 1: baseline 100 ms (p10 90, p90 125), attn_ln 80 ms (p10 50, p90 100)
        batch 2: baseline 200 ms (p10 160, p90 250), attn_ln 50 ms (p10 40, p90 100)
        batch 4: attn_ln only (10 ms): no baseline to compare with, left out
    GPU B: attn_ln batch 1 at 10 ms with no baseline on GPU B: left out, not compared with GPU A's."""

    @classmethod
    def build(cls, db):
        db.set_run(gpu_name="GPU A", h2d_gbps=25.0)
        other = db.add_run(gpu_name="GPU B", h2d_gbps=25.0)
        ids = {}

        def add(name, variant, batch, median, p10, p90, **fields):
            ids[name] = gpu_cell(db, "device", variant=variant, batch=batch, latency_median_ms=median,
                                 latency_p10_ms=p10, latency_p90_ms=p90, streamed_bytes=0, **fields)

        add("base1", "baseline", 1, 100.0, 90.0, 125.0)
        add("fused1", "attn_ln", 1, 80.0, 50.0, 100.0)
        add("base2", "baseline", 2, 200.0, 160.0, 250.0)
        add("fused2", "attn_ln", 2, 50.0, 40.0, 100.0, iterations=7)  # another protocol, the same workload
        add("fused4", "attn_ln", 4, 10.0, 10.0, 10.0)
        add("fused_b", "attn_ln", 1, 10.0, 10.0, 10.0, run_id=other)
        add("failed", "attn_ln", 2, None, None, None, status="failed", reason="crashed", streams=3)
        return ids

    def test_ratio_direction_and_geometric_mean(self):
        data = report_data(self.path)
        table = normalized.normalized(data.ok, data.db.axes)
        self.assertEqual(set(table["processor"]), {"GPU A"})
        rows = table.set_index("variant")
        fused = rows.loc["attn_ln"]
        self.assertAlmostEqual(fused["perf"], math.sqrt(5))       # 100/80 = 1.25, 200/50 = 4: sqrt(1.25 × 4)
        self.assertAlmostEqual(fused["perf_lo"], math.sqrt(2))    # at p90: 100/100, 200/100
        self.assertAlmostEqual(fused["perf_hi"], math.sqrt(10))   # at p10: 100/50, 200/40
        self.assertEqual(fused["workloads"], 2)
        base = rows.loc["baseline"]
        self.assertAlmostEqual(base["perf"], 1.0)
        self.assertAlmostEqual(base["perf_lo"], 0.8)                       # 100/125, 200/250
        self.assertAlmostEqual(base["perf_hi"], math.sqrt(100 / 90 * 1.25))  # 100/90, 200/160
        self.assertEqual(base["workloads"], 2)

    def test_caption_counts_baseline_workloads(self):
        drawn = normalized.render(report_data(self.path))
        plt.close(drawn.figure)
        self.assertIn("(2 baseline workloads in all)", drawn.caption)
        self.assertIn("Not drawn: 1 cell of other variants that were not measured (crashed)", drawn.caption)

    def test_title_reference_line_and_axis_from_zero(self):
        """The title names the workloads (batch 4 and GPU B's cell are measured, though without a
        baseline to set them against) but not the variants, which the bars name; the line at 1 is in
        the legend; the ratio's axis starts at zero."""
        drawn = normalized.render(report_data(self.path))
        self.addCleanup(plt.close, drawn.figure)
        self.assertEqual(suptitle(drawn.figure), "tiny fp32, batch 1–4 × seq 8\n"
                                                 "bars vary variant, grouped by model; one panel per processor")
        (ax,) = drawn.figure.axes
        self.assertEqual(legend_texts(ax), ["baseline = 1", "baseline", "attn_ln"])
        self.assertEqual(ax.get_ylim()[0], 0.0)

    def test_repeats_give_run_to_run_error_bars(self):
        """Three repeats of baseline (100, 110, 90 ms: median 100) and of attn_ln (50, 40, 80 ms) on one
        workload (batch 8): ratios 2, 2.5 and 1.25, their geometric mean and their extremes."""
        db = FixtureDb(self.folder, "repeats.db")
        for repeat, (base, fused) in enumerate([(100.0, 50.0), (110.0, 40.0), (90.0, 80.0)], start=1):
            gpu_cell(db, "device", variant="baseline", batch=8, repeat=repeat, latency_median_ms=base,
                     latency_p10_ms=base, latency_p90_ms=base, streamed_bytes=0)
            gpu_cell(db, "device", variant="attn_ln", batch=8, repeat=repeat, latency_median_ms=fused,
                     latency_p10_ms=fused - 5, latency_p90_ms=fused + 5, streamed_bytes=0)
        db.close()
        data = report_data(db.path)
        rows = normalized.normalized(data.ok, data.db.axes).set_index("variant")
        fused = rows.loc["attn_ln"]
        self.assertAlmostEqual(fused["perf"], (2.0 * 2.5 * 1.25) ** (1 / 3))
        self.assertAlmostEqual(fused["perf_lo"], 1.25)
        self.assertAlmostEqual(fused["perf_hi"], 2.5)
        self.assertEqual(fused["workloads"], 1)
        self.assertEqual(fused["repeats"], 3)
        drawn = normalized.render(report_data(db.path))
        plt.close(drawn.figure)
        self.assertIn("the run-to-run spread", drawn.caption)

    def test_variants_table_script(self):
        """scripts/bench/variants_table.py: the median over repeats, each repeat, and the ratio to
        baseline; and the PyTorch side-by-side (sweetspot's fastest variant) from pytorch_eager.py's output."""
        db = FixtureDb(self.folder, "variants.db")
        for repeat, (base, fused) in enumerate([(100.0, 50.0), (110.0, 40.0), (90.0, 80.0)], start=1):
            gpu_cell(db, "device", variant="baseline", repeat=repeat, latency_median_ms=base, launches_per_forward=60)
            gpu_cell(db, "device", variant="all", repeat=repeat, latency_median_ms=fused, launches_per_forward=20)
        # An absolute budget is stored in bytes and shown in GiB.
        gpu_cell(db, "uvm-prefetch", variant="baseline", budget="22548578304", latency_median_ms=300.0,
                 launches_per_forward=60)
        db.close()
        torch_out = os.path.join(self.folder, "pytorch.txt")
        with open(torch_out, "w") as f:
            f.write("model dtype batch seq attn median_ms p10_ms p90_ms\n"
                    "tiny fp32 1 8 eager 200.0 190.0 210.0\ntiny fp32 1 8 sdpa 100.0 95.0 105.0\n")
        out = subprocess.run([sys.executable, str(VARIANTS_TABLE), db.path, "--pytorch", torch_out], check=True,
                             capture_output=True, text=True).stdout
        self.assertIn("| baseline | 100.0 (100.0, 110.0, 90.0) | 1.000 | 60 |", out)
        self.assertIn("| all | 50.0 (50.0, 40.0, 80.0) | 2.000 | 20 |", out)
        self.assertIn("| 21 GiB | baseline | 300.0 | 1.000 | 60 |", out)
        self.assertIn("| tiny | fp32 | 1 × 8 | 200.0 | 100.0 | 100.0 | 50.0 | all | 2.00 |", out)

    def test_packing_table_script(self):
        """scripts/bench/packing_table.py: padded against packed (4 ms against 1 ms over the same 1000 real
        tokens: 4.00 ×; 3 of 10 GiB: 30.0 %), a training pair whose padded cell was skipped (its status and
        predicted peak beside the packed cell's numbers), the varlen overhead (100 TFLOP/s packed against
        102 for the rectangular batch of the same 320 tokens: +2.0 %), and PyTorch's rows beside the cells
        they name (its packed 3 ms ÷ our 1 ms)."""
        db = FixtureDb(self.folder, "packing.db")
        ragged = dict(model="llama_1b", dtype="bf16", variant="attn_proj", batch=32, seq=2048,
                      lengths="lognormal:330,0.85", real_tokens=1000)
        padded = gpu_cell(db, "device", packing="padded", latency_median_ms=4.0, tokens_per_s=250000.0,
                          achieved_tflops=50.0, gpu_peak_bytes=10 * GIB, padding_share=0.75, **ragged)
        packed = gpu_cell(db, "device", packing="packed", latency_median_ms=1.0, tokens_per_s=1e6,
                          achieved_tflops=200.0, gpu_peak_bytes=3 * GIB, padding_share=0.0, **ragged)
        train = dict(model="llama_1b", dtype="bf16", variant="flash_attention", batch=32, seq=2048, mode="train",
                     lengths="lognormal:330,0.85")
        gpu_cell(db, "device", packing="padded", status="skipped", reason="predicted OOM",
                 predicted_peak_bytes=96 * GIB, **train)
        gpu_cell(db, "device", packing="packed", real_tokens=1000, latency_median_ms=2.0, tokens_per_s=500000.0,
                 achieved_tflops=150.0, gpu_peak_bytes=5 * GIB, padding_share=0.0, **train)
        near = dict(model="llama_1b", dtype="bf16", variant="attn_proj", batch=32, latency_median_ms=1.0,
                    tokens_per_s=320000.0, padding_share=0.0, gpu_peak_bytes=GIB)
        gpu_cell(db, "device", seq=11, lengths="uniform:9-11", packing="packed", real_tokens=320,
                 achieved_tflops=100.0, **near)
        gpu_cell(db, "device", seq=10, lengths="fixed", packing="padded", real_tokens=320, achieved_tflops=102.0,
                 **near)
        db.close()
        torch_out = os.path.join(self.folder, "pytorch-packing.txt")
        with open(torch_out, "w") as f:
            f.write("model dtype mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err cells\n"
                    f"llama_1b bf16 padded 1000 4000 8.0 8.0 8.0 5.0 0 {padded},{packed}\n"
                    f"llama_1b bf16 packed 1000 1000 3.0 3.0 3.0 2.0 0 {padded},{packed}\n")
        out = subprocess.run([sys.executable, str(PACKING_TABLE), db.path, "--pytorch", torch_out], check=True,
                             capture_output=True, text=True).stdout
        self.assertIn("| llama_1b | infer | bf16 | attn_proj | 32 | lognormal:330,0.85 | 1000 | 75.0 % | 4.0 | 1.0 | "
                      "4.00 | 250000 | 1000000 | 10.00 | 3.00 | 30.0 % |", out)
        self.assertIn("| llama_1b | train | bf16 | flash_attention | 32 | lognormal:330,0.85 | 1000 | - | skipped | 2.0 | "
                      "- | - | 500000 | predicted 96.00 | 5.00 | - |", out)
        self.assertIn("| llama_1b | bf16 | attn_proj | 32 | uniform:9-11 | 320 | 32 × 10 | 100.0 | 102.0 | +2.0 % |", out)
        self.assertIn("| llama_1b | 32 | lognormal:330,0.85 | 1000 | 8.0 | 3.0 | 5.00 | 2.00 | 4.0 | 1.0 | 10.00 | 3.00 "
                      "| 3.00 |", out)

    def test_cell_phases_per_backend(self):
        """Where the sweep's time went: each phase's mean seconds per cell of each backend, the phases in
        the order the cells ran them."""
        db = FixtureDb(self.folder, "phases.db")
        for backend, phases in [("device", [("start", 0.5), ("weights", 2.0), ("timed", 1.0)]),
                                ("device", [("start", 0.3), ("weights", 4.0), ("timed", 3.0)]),
                                ("uvm", [("start", 0.4), ("weights", 1.0), ("timed", 9.0)])]:
            cell = gpu_cell(db, backend)
            for position, (phase, seconds) in enumerate(phases):
                db.insert("cell_phases", dict(cell_id=cell, position=position, phase=phase, seconds=seconds))
        gpu_cell(db, "device", batch=2)  # no phases stored: not in the figure, nor in its title
        db.close()
        means, order, reference = cell_phases.phase_seconds(report_data(db.path))
        self.assertEqual(order, ["start", "weights", "timed"])
        self.assertAlmostEqual(means["device"]["weights"], 3.0)
        self.assertAlmostEqual(means["device"]["start"], 0.4)
        self.assertAlmostEqual(means["uvm"]["timed"], 9.0)
        self.assertIsNone(reference)
        drawn = cell_phases.render(report_data(db.path))
        self.addCleanup(plt.close, drawn.figure)
        self.assertIn("device 5.40 s, uvm 10.40 s", drawn.caption)
        self.assertEqual(suptitle(drawn.figure),
                         "tiny fp32, batch 1 × seq 8\nbars vary backend (the mean over its cells)")
        self.assertNotIn("reference forward", drawn.caption)

    def test_cell_phases_keep_the_reference_forward_apart(self):
        """The kept reference forward that one cell of a workload runs for all (the `reference` phase, or
        before schema 14 that cell's whole `check`) is not a per-cell cost of its backend.

        device: a cell that ran the reference (check 0.5 s, reference 4.0 s) and one that reused it
        (check 0.1 s); uvm: a cell of an older file whose check (6.0 s) ran the reference, and one that
        reused it (check 0.3 s). A host cell checks against float64 loops every time (check 0.2 s)."""
        db = FixtureDb(self.folder, "reference_phases.db")
        for backend, ran, phases in [("device", 1, [("timed", 1.0), ("check", 0.5), ("reference", 4.0)]),
                                     ("device", 0, [("timed", 3.0), ("check", 0.1)]),
                                     ("uvm", 1, [("timed", 2.0), ("check", 6.0)]),
                                     ("uvm", 0, [("timed", 2.0), ("check", 0.3)])]:
            cell = gpu_cell(db, backend, check_reference_computed=ran, check_reference_key="k1")
            for position, (phase, seconds) in enumerate(phases):
                db.insert("cell_phases", dict(cell_id=cell, position=position, phase=phase, seconds=seconds))
        host = db.add_cell(backend="host", status="ok", check_reference_computed=1, check_reference_key=None)
        db.insert("cell_phases", dict(cell_id=host, position=1, phase="check", seconds=0.2))
        db.close()
        means, order, reference = cell_phases.phase_seconds(report_data(db.path))
        self.assertEqual(order, ["timed", "check"])
        self.assertAlmostEqual(means["device"]["check"], 0.3)   # (0.5 + 0.1) / 2
        self.assertAlmostEqual(means["uvm"]["check"], 0.15)     # (0 + 0.3) / 2: the older check went to the reference
        self.assertAlmostEqual(means["host"]["check"], 0.2)     # float64 loops: a cost of every host cell
        self.assertEqual(reference, {"cells": 2, "seconds": 10.0})  # 4.0 + 6.0
        drawn = cell_phases.render(report_data(db.path))
        plt.close(drawn.figure)
        self.assertIn("device 2.30 s, host 0.20 s, uvm 2.15 s", drawn.caption)  # (1+0.5+3+0.1)/2, (2+2+0.3)/2
        self.assertIn("the mean over the 2 cells that ran one (10.00 s in all)", drawn.caption)

    def test_memory_table_script(self):
        """scripts/bench/memory_table.py: per backend and variant, the largest and median |error| of
        the predicted peak (memory_accuracy) and of the predicted allocations; the peak's parts; the
        peak's error per model and dtype; the host peak's error (host_memory_accuracy) per backend,
        split by whether the check ran its reference forward."""
        db = FixtureDb(self.folder, "memory.db")
        common = dict(device_weight_bytes=1000 * MIB, activation_bytes=100 * MIB, predicted_alloc_bytes=1100 * MIB,
                      gpu_context_bytes=500 * MIB)
        hosts = {1: (1000, 990, 1), 2: (400, 404, 0), 3: (400, 400, 0)}  # rss, predicted MiB, reference ran
        for batch, peak, predicted in [(1, 1600, 1608), (2, 1600, 1596), (3, 1600, 1600)]:
            rss, host, ran = hosts[batch]
            gpu_cell(db, "device", batch=batch, gpu_peak_bytes=peak * MIB, predicted_peak_bytes=predicted * MIB,
                     gpu_other_processes=1 if batch == 3 else 0, peak_host_rss_bytes=rss * MIB,
                     predicted_host_peak_bytes=host * MIB, check_reference_computed=ran, **common)
        gpu_cell(db, "uvm-prefetch", gpu_peak_bytes=3200 * MIB, predicted_peak_bytes=1600 * MIB,
                 gpu_other_processes=0, **common)
        gpu_cell(db, "device", batch=4, gpu_peak_bytes=None, predicted_peak_bytes=1600 * MIB, **common)  # no NVML
        db.close()
        out = subprocess.run([sys.executable, str(MEMORY_TABLE), db.path], check=True, capture_output=True,
                             text=True).stdout
        self.assertIn("| device | baseline | 3 | 0.50 % | 0.25 % | 0.00 % | 1 |", out)  # |+8|, |−4|, 0 of 1600
        self.assertIn("| uvm-prefetch | baseline | 1 | 50.00 % | 50.00 % | 0.00 % | 0 |", out)
        self.assertIn("| all | | 4 | 50.00 % | 0.38 % | 0.00 % | 1 |", out)
        self.assertIn("| device | 1,600.0–1,600.0 | 500.0–500.0 | 1,100.0–1,100.0 | 0.0–0.0 |", out)
        self.assertIn("| uvm-prefetch | 3,200.0–3,200.0 | 500.0–500.0 | 1,100.0–1,100.0 | 1,600.0–1,600.0 |", out)
        self.assertIn("| tiny | fp32 | 4 | 50.00 % | 0.38 % |", out)
        self.assertIn("| device | ran | 1 | 1.00 % | 1.00 % | 1,000.0–1,000.0 |", out)  # 990 against 1000
        self.assertIn("| device | reused | 2 | 1.00 % | 0.50 % | 400.0–400.0 |", out)  # |+4| and 0 of 400

    def test_train_side_by_side_script(self):
        """scripts/bench/train_side_by_side.py: sweetspot's training cells beside pytorch_train.py's
        lines, the ratio per batch, a skipped cell and PyTorch's OOM shown as such, and each side's
        best batch per dtype; a LLaMA model's lines and cells in the same files are its own table's."""
        db = FixtureDb(self.folder, "side.db")
        big = dict(model="gpt2_1.5b", mode="train", seq=1024)
        gpu_cell(db, "device", dtype="bf16", batch=4, tokens_per_s=30000.0, gpu_peak_bytes=32 * GIB, **big)
        gpu_cell(db, "device", dtype="bf16", batch=8, tokens_per_s=40000.0, gpu_peak_bytes=40 * GIB, **big)
        gpu_cell(db, "device", dtype="fp32", batch=8, status="skipped", reason="predicted OOM", **big)
        gpu_cell(db, "device", dtype="fp32", batch=4, tokens_per_s=4500.0, gpu_peak_bytes=40 * GIB, **big)
        gpu_cell(db, "device", model="llama_1b", mode="train", seq=2048, dtype="bf16", batch=4, tokens_per_s=20480.0,
                 gpu_peak_bytes=30 * GIB)
        db.close()
        pytorch = os.path.join(self.folder, "pytorch.txt")
        with open(pytorch, "w") as f:
            f.write("model dtype batch seq median_ms tokens_per_s peak_gib\n"
                    "gpt2_1.5b bf16 4 1024 250.0 16000 50.60\n"
                    "gpt2_1.5b bf16 8 1024 out of memory\n"
                    "gpt2_1.5b fp32 4 1024 1000.0 4000 57.80\n"
                    "gpt2_1.5b fp32 8 1024 out of memory\n"
                    "llama_1b bf16 4 2048 500.0 16384 40.00\n")
        out = subprocess.run([sys.executable, str(TRAIN_SIDE_BY_SIDE), db.path, pytorch], check=True,
                             capture_output=True, text=True).stdout
        self.assertIn("| bf16 | 4 | 30,000 (32.0 GiB) | 16,000 (50.6 GiB) | 1.88 |", out)  # 30000 / 16000
        self.assertIn("| bf16 | 8 | 40,000 (40.0 GiB) | out of memory | – |", out)
        self.assertIn("| fp32 | 4 | 4,500 (40.0 GiB) | 4,000 (57.8 GiB) | 1.12 |", out)  # 1.125 rounds to even
        self.assertIn("| fp32 | 8 | skipped | out of memory | – |", out)
        self.assertIn("bf16: sweetspot 40,000 tokens/s (batch 8) against PyTorch's 16,000 (batch 4): 2.50 ×", out)
        self.assertIn("fp32: sweetspot 4,500 tokens/s (batch 4) against PyTorch's 4,000 (batch 4): 1.12 ×", out)
        llama = subprocess.run([sys.executable, str(TRAIN_SIDE_BY_SIDE), db.path, pytorch, "--model", "llama_1b"],
                               check=True, capture_output=True, text=True).stdout
        self.assertIn("| bf16 | 4 | 20,480 (30.0 GiB) | 16,384 (40.0 GiB) | 1.25 |", llama)  # 20480 / 16384
        self.assertNotIn("fp32", llama)

    def test_recompute_table_script(self):
        """scripts/bench/recompute_table.py: per batch, each recompute setting's tokens/s against
        none's and the activation bytes it saves; a skipped cell as such; llm.c's -r runs from their
        logs, the median of the steps after the first two, an out-of-memory run without steps."""
        db = FixtureDb(self.folder, "recompute.db")
        big = dict(model="gpt2_1.5b", mode="train", seq=1024, dtype="bf16", batch=16)
        gpu_cell(db, "device", recompute="none", tokens_per_s=40000.0, activation_bytes=40 * GIB,
                 gpu_peak_bytes=70 * GIB, **big)
        gpu_cell(db, "device", recompute="gelu", tokens_per_s=39000.0, activation_bytes=30 * GIB,
                 gpu_peak_bytes=60 * GIB, **big)
        gpu_cell(db, "device", recompute="block", tokens_per_s=30000.0, activation_bytes=4 * GIB,
                 gpu_peak_bytes=34 * GIB, **big)
        gpu_cell(db, "device", recompute="mlp", status="skipped", reason="predicted OOM", **big)
        gpu_cell(db, "device", recompute="none", tokens_per_s=1.0, activation_bytes=1, gpu_peak_bytes=1,
                 **dict(big, dtype="fp32"))  # another dtype: not in the bf16 table
        db.close()
        logs = {}
        for r, text in {"0": "allocating 40960 MiB for activations\n"
                             + "".join(f"step {i} | {v} tok/s\n" for i, v in enumerate([1, 2, 100, 300, 200]))
                             + "device memory usage: 71680 MiB / 81559 MiB\n",
                        "1": "allocating 30720 MiB for activations\n"
                             + "".join(f"step {i} | {v} tok/s\n" for i, v in enumerate([5, 5, 150, 150]))
                             + "device memory usage: 61440 MiB / 81559 MiB\n",
                        "2": "allocating 99999 MiB for activations\nout of memory\n"}.items():
            logs[r] = os.path.join(self.folder, f"llmc-r{r}.log")
            with open(logs[r], "w") as f:
                f.write(text)
        out = subprocess.run([sys.executable, str(RECOMPUTE_TABLE), db.path] + [a for r, path in logs.items()
                                                                                 for a in ("--llmc", f"{r}={path}")],
                             check=True, capture_output=True, text=True).stdout
        self.assertIn("gpt2_1.5b bf16, batch 16:", out)
        self.assertIn("| none | 40,000 | 1.000 | 40.00 | 0.00 | 70.00 |", out)
        self.assertIn("| gelu | 39,000 | 0.975 | 30.00 | 10.00 | 60.00 |", out)  # 39000 / 40000; 40 - 30 GiB
        self.assertIn("| block | 30,000 | 0.750 | 4.00 | 36.00 | 34.00 |", out)
        self.assertIn("| mlp | skipped | – | – | – | – |", out)
        self.assertNotIn("fp32", out)
        # ladder order: none, gelu, mlp, block
        self.assertLess(out.index("| gelu |"), out.index("| mlp |"))
        self.assertLess(out.index("| mlp |"), out.index("| block |"))
        self.assertIn("| 0 | 200 | 1.000 | 40.00 | 70.00 |", out)  # median of 100, 300, 200
        self.assertIn("| 1 | 150 | 0.750 | 30.00 | 60.00 |", out)
        self.assertIn("| 2 | out of memory | – | 97.66 | – |", out)  # 99999 MiB

    def test_overhead_table_script(self):
        """scripts/bench/overhead_table.py: each cell's wall time less (warm-ups + timed iterations) ×
        its median, against the target of its model; the median seconds of each phase per backend."""
        db = FixtureDb(self.folder, "overhead.db")
        for backend, model, wall, weight_bytes, phases in [
                ("device", "gpt2_1.5b", 2.0, 3 * GB, [("weights", 0.5), ("timed", 1.0)]),
                ("device", "gpt2_1.5b", 4.0, 3 * GB, [("weights", 2.5), ("timed", 1.0)]),
                ("explicit-copy", "gpt3_13b", 5.0, 26 * GB, [("weights", 3.0), ("timed", 1.0)]),
                ("device", "tiny", 1.0, 1000, [("weights", 0.1), ("timed", 0.1)])]:
            cell = gpu_cell(db, backend, model=model, wall_s=wall, weight_bytes=weight_bytes, warmups=1,
                            latency_median_ms=250.0)
            for i in range(3):  # with the warm-up: 4 × 250 ms measuring
                db.insert("iterations", dict(cell_id=cell, phase="timed", iteration=i, latency_ms=250.0))
            for position, (phase, seconds) in enumerate(phases):
                db.insert("cell_phases", dict(cell_id=cell, position=position, phase=phase, seconds=seconds))
        gpu_cell(db, "device", model="gpt2_1.5b", status="failed", wall_s=99.0, latency_median_ms=None)  # not counted
        db.close()
        out = subprocess.run([sys.executable, str(OVERHEAD_TABLE), db.path], check=True, capture_output=True,
                             text=True).stdout
        self.assertIn("| gpt2_1.5b | fp32 | device | 2 | 1.00 | 2.00 | 3.00 | 1.50 | 1 of 2 |", out)
        self.assertIn("| gpt3_13b | fp32 | explicit-copy | 1 | 4.00 | 4.00 | 4.00 | 2.30 | 0 of 1 |", out)  # 1 + 26/20
        self.assertIn("| tiny | fp32 | device | 1 | 0.00 | 0.00 | 0.00 | – | – |", out)
        self.assertIn("| phase | device: median s | explicit-copy: median s |", out)
        self.assertIn("| weights | 0.50 | 3.00 |", out)  # median of 0.5, 2.5, 0.1

    def test_fit_check_counts_a_uvm_cell_whose_budget_the_driver_broke_as_not_running(self):
        """scripts/bench/fit_check.py's outcome of a run at the limit: a uvm-prefetch cell whose trace
        holds device-to-host migrations the driver made to evict (cause 4) ran, but not under its
        budget; migrations the backend asked for (cause 1), or an explicit-copy cell's copies, do not
        count; a failed cell did not run."""
        spec = importlib.util.spec_from_file_location("fit_check", FIT_CHECK)
        fit_check = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fit_check)
        db = FixtureDb(self.folder, "fit.db")
        kept = gpu_cell(db, "uvm-prefetch", batch=4, trace_iterations=1)
        db.add_copy(kept, 1, 2, 12, 3 * MIB, cause=1)
        broken = gpu_cell(db, "uvm-prefetch", batch=5, trace_iterations=1)
        db.add_copy(broken, 1, 2, 12, 3 * MIB, cause=1)
        db.add_copy(broken, 3, 4, 12, 2 * MIB, cause=4)
        db.add_copy(broken, 5, 6, 12, 1 * MIB, cause=4)
        copied = gpu_cell(db, "explicit-copy", batch=4)
        db.add_copy(copied, 1, 2, 12, 3 * MIB)
        gpu_cell(db, "explicit-copy", batch=5, status="failed", reason="out of memory")
        db.close()
        uvm = dict(model="tiny", backend="uvm-prefetch")
        self.assertEqual(fit_check.outcome(db.path, uvm, 4), (True, "ok"))
        self.assertEqual(fit_check.outcome(db.path, uvm, 5),
                         (False, "ok, budget not held (3 MiB evicted by the driver)"))
        self.assertEqual(fit_check.outcome(db.path, uvm, 6), (False, "not run"))
        copy = dict(model="tiny", backend="explicit-copy")
        self.assertEqual(fit_check.outcome(db.path, copy, 4), (True, "ok"))
        self.assertEqual(fit_check.outcome(db.path, copy, 5), (False, "failed"))

    def test_cell_table_shows_what_a_fusion_saves(self):
        """Launches per forward and activation MiB in the page's cell table, per cell."""
        db = FixtureDb(self.folder, "saves.db")
        base = gpu_cell(db, "device", launches_per_forward=819, activation_bytes=416358400)
        fused = gpu_cell(db, "device", variant="all", launches_per_forward=387, activation_bytes=311500800)
        db.close()
        results = ResultsDb(db.path)
        headings, rows = cell_table(results.cells(), results.axes)
        names = [h for h, _ in headings]
        by_id = {r[names.index("cell")].text: dict(zip(names, r)) for r in rows}
        self.assertEqual(by_id[str(base)]["launches / forward"].text, "819")
        self.assertEqual(by_id[str(fused)]["launches / forward"].text, "387")
        self.assertEqual(by_id[str(base)]["activations MiB"].text, "397.1")   # 416358400 / 2^20
        self.assertEqual(by_id[str(fused)]["activations MiB"].text, "297.1")

    def test_cell_table_flags_noisy_cells(self):
        """A cell that stopped on a limit above its noise criterion reads "ok (noisy)", with its noise."""
        db = FixtureDb(self.folder, "noisy.db")
        quiet = gpu_cell(db, "device", noise_pct=0.4, noisy=0)
        loud = gpu_cell(db, "device", batch=2, noise_pct=7.25, noisy=1)
        db.close()
        results = ResultsDb(db.path)
        headings, rows = cell_table(results.cells(), results.axes)
        names = [h for h, _ in headings]
        by_id = {r[names.index("cell")].text: dict(zip(names, r)) for r in rows}
        self.assertEqual(by_id[str(quiet)]["status"].text, "ok")
        self.assertEqual(by_id[str(loud)]["status"].text, "ok (noisy)")
        self.assertEqual(by_id[str(loud)]["noise %"].text, "7.25")

    def test_throughput(self):
        """Throughput figure: batch × seq ÷ latency, the low end at p90, the high end at p10."""
        points = throughput.throughput(report_data(self.path).ok).set_index("cell_id")
        base2 = points.loc[self.ids["base2"]]
        self.assertAlmostEqual(base2["tps"], 80.0)      # 2 × 8 tokens / 0.200 s
        self.assertAlmostEqual(base2["tps_lo"], 64.0)   # 16 / 0.250 s
        self.assertAlmostEqual(base2["tps_hi"], 100.0)  # 16 / 0.160 s
        self.assertAlmostEqual(points.loc[self.ids["fused4"], "tps"], 3200.0)  # 4 × 8 / 0.010 s
        self.assertNotIn(self.ids["failed"], points.index)


# --- what every figure says about itself: titles, legends, axes, repeats, the cell table -------------

class FigureSelfDescriptionTest(DbTest):
    """One run, a 25 GB/s link probe; the tiny model, fp32, seq 8 (8 tokens a sequence).

    device, budget 100 %:
        batch 1, repeats 1-3 at 100, 80, 200 ms: 80, 100, 40 tokens/s (8000 ÷ ms)
        batch 2, repeats 1-3 at 160, 200, 100 ms: 100, 80, 160 tokens/s (16000 ÷ ms)
        batch 4, once at 100 ms (p10 80, p90 160): 320 tokens/s, 200 at p90, 400 at p10
    explicit-copy, batch 1: 25 % (oversubscription 4, 6 GB streamed, 300 ms) and 50 % (2, 4 GB, 240 ms);
        bound = max(GB ÷ 25 GB/s, the fastest device batch-1 repeat 80 ms) = 240 and 160 ms: 1.25, 1.5
    uvm-prefetch, batch 1, 50 %: prefetch 1 and 2, each with evict migrate (300, 250 ms) and
        read-mostly (120, 110 ms)."""

    @classmethod
    def build(cls, db):
        db.set_run(h2d_gbps=25.0, gpu_name="Fixture GPU", gpu_driver="CUDA 13.0")
        ids = {}
        device = dict(budget="100%", oversubscription=1.0, streamed_bytes=0)
        for batch, latencies in ((1, (100.0, 80.0, 200.0)), (2, (160.0, 200.0, 100.0))):
            for repeat, ms in enumerate(latencies, start=1):
                gpu_cell(db, "device", batch=batch, repeat=repeat, latency_median_ms=ms, latency_p10_ms=ms - 1,
                         latency_p90_ms=ms + 1, **device)
        gpu_cell(db, "device", batch=4, latency_median_ms=100.0, latency_p10_ms=80.0, latency_p90_ms=160.0, **device)
        for budget, over, streamed, ms in (("25%", 4.0, 6 * GB, 300.0), ("50%", 2.0, 4 * GB, 240.0)):
            ids[budget] = gpu_cell(db, "explicit-copy", budget=budget, oversubscription=over, streamed_bytes=streamed,
                                   latency_median_ms=ms, latency_p10_ms=ms - 10, latency_p90_ms=ms + 10)
        for prefetch, evict, ms in (("1", "migrate", 300.0), ("2", "migrate", 250.0), ("1", "read-mostly", 120.0),
                                    ("2", "read-mostly", 110.0)):
            gpu_cell(db, "uvm-prefetch", prefetch=prefetch, evict=evict, budget="50%", oversubscription=2.0,
                     streamed_bytes=4 * GB, latency_median_ms=ms, latency_p10_ms=ms - 5, latency_p90_ms=ms + 5)
        return ids

    def test_throughput_title_names_the_workload_and_repeats_are_error_bars(self):
        drawn = self.render(throughput)
        self.assertEqual(suptitle(drawn.figure),
                         "tiny fp32, batch 1–4 × seq 8\none panel per backend; one line each")
        (ax,) = drawn.figure.axes  # the device panel; no other backend has two batch sizes
        self.assertEqual(ax.get_title(), "device")
        # One line, not one per repeat, labelled by its backend rather than by the first cell's batch.
        self.assertEqual(legend_texts(ax), ["device"])
        (x, y, bars), = errorbar_data(ax)
        self.assertEqual(x, [1.0, 2.0, 4.0])
        self.assertEqual(y, [80.0, 100.0, 320.0])  # medians of the repeats; batch 4 measured once
        self.assertEqual(bars, [(1.0, 40.0, 100.0), (2.0, 80.0, 160.0), (4.0, 200.0, 400.0)])
        self.assertEqual(ax.get_legend().get_title().get_text(), "point: median of repeats\nerror bars: their "
                                                                 "min–max\n(measured once: iterations' p10–p90)")
        self.assertIn("(1 series, 3 points of 7 cells, on 1 backend)", drawn.caption)
        self.assertIn("(cells that differ only in `repeat`, up to 3) is their median, its error bars their lowest and "
                      "highest value; at a point measured once, error bars: throughput at the 90th and 10th "
                      "percentile latency.", drawn.caption)

    def test_ratio_axis_from_zero_with_its_reference_in_the_legend(self):
        drawn = self.render(oversubscription)
        self.assertEqual(suptitle(drawn.figure), "tiny fp32, batch 1 × seq 8\none panel per backend; one line each")
        ax = drawn.figure.axes[0]
        self.assertEqual(ax.get_title(), "explicit-copy")
        (x, y, _), = errorbar_data(ax)
        self.assertEqual(x, [2.0, 4.0])
        self.assertEqual(y, [1.5, 1.25])  # 240 / 160, 300 / 240
        self.assertEqual(ax.get_ylim()[0], 0.0)
        self.assertEqual(ax.get_ylabel(), "latency ÷ bound")
        self.assertEqual(sorted(legend_texts(ax)), ["bound", "explicit-copy"])
        self.assertEqual(ax.get_legend().get_title().get_text(), "error bars: iterations' p10–p90")
        self.assertIn("Error bars: 10th and 90th percentile latency ÷ bound.", drawn.caption)

    def test_lines_named_by_what_tells_them_apart(self):
        drawn = self.render(latency_prefetch)
        self.assertEqual(suptitle(drawn.figure), "tiny fp32, batch 1 × seq 8\none panel per backend; lines vary evict")
        (ax,) = drawn.figure.axes
        self.assertEqual(legend_texts(ax), ["evict=migrate", "evict=read-mostly"])
        self.assertEqual([y for _, y, _ in errorbar_data(ax)], [[300.0, 250.0], [120.0, 110.0]])

    def test_log_ratio_axis_says_it_does_not_start_at_zero(self):
        fig, ax = plt.subplots()
        self.addCleanup(plt.close, fig)
        ax.plot([1, 2], [1.0, 100.0])
        ax.set_yscale("log")
        ratio_axis(ax, "latency ÷ bound")
        self.assertEqual(ax.get_ylabel(), "latency ÷ bound (log scale, not from 0)")

    def test_workload_title_names_the_other_workload_parameters_the_database_varies(self):
        """tf32 takes two values among the cells, so a figure of the tf32 = 1 cells says so; dropout
        takes one, so it goes unnamed."""
        cells = pd.DataFrame([dict(model="tiny", dtype="fp32", batch=b, seq=8, tf32=t, dropout=0.0, backend="device")
                              for b in (1, 2) for t in (0, 1)])
        shown = cells[cells["tf32"] == 1]
        self.assertEqual(workload_title(shown, cells, Axes(OLDER_AXES)), "tiny fp32, batch 1–2 × seq 8, tf32=1")
        self.assertEqual(workload_title(cells[cells["batch"] == 1], cells[cells["tf32"] == 0], Axes(OLDER_AXES)),
                         "tiny fp32, batch 1 × seq 8")


class CellTableColumnsTest(DbTest):
    """Three cells of the tiny model: two device repeats, and a uvm cell that evicts read-mostly and
    traces 2 iterations. What tells them apart: backend, evict, trace_iterations, repeat."""

    @classmethod
    def build(cls, db):
        return {"first": gpu_cell(db, "device", repeat=1, latency_median_ms=10.0),
                "second": gpu_cell(db, "device", repeat=2, latency_median_ms=11.0),
                "uvm": gpu_cell(db, "uvm", evict="read-mostly", trace_iterations=2, latency_median_ms=30.0)}

    def table(self):
        db = ResultsDb(self.path)
        return db.cells(), db.axes

    def test_a_column_for_every_axis_that_differs(self):
        headings, rows = cell_table(*self.table())
        names = [h for h, _ in headings]
        self.assertEqual(names[:6], ["cell", "backend", "evict", "trace_iterations", "repeat", "status"])
        self.assertNotIn("model", names)  # the same in every cell: said above the table
        by_id = {r[0].text: dict(zip(names, r)) for r in rows}
        second = by_id[str(self.ids["second"])]
        self.assertEqual((second["repeat"].text, second["repeat"].number), ("2", 2))
        self.assertEqual(by_id[str(self.ids["uvm"])]["evict"].text, "read-mostly")
        self.assertEqual(dict(headings)["trace_iterations"], "num")

    def test_the_shared_parameters_are_said_once(self):
        same = dict(same_in_every_cell(*self.table()))
        self.assertEqual((same["model"], same["dtype"], same["batch"]), ("tiny", "fp32", "1"))
        self.assertNotIn("backend", same)

    def test_page_section_scrolls_and_wraps_headings(self):
        html = html_page.cells_section(*self.table())
        self.assertIn('<div class="wide cells"><table class="sortable cells">', html)
        self.assertIn('<th data-type="num">trace_<wbr>iterations</th>', html)
        self.assertIn("Same in every cell: model = tiny, ", html)
        self.assertIn(".wide.cells { max-height: 85vh; overflow: auto;", html_page.STYLE)
# --- training cells: figures/training.py, figures/training_phases.py, the cell table ----------------

class TrainingFigureTest(DbTest):
    """Training cells (mode = "train") of the tiny model at seq 8 (8 tokens a sequence), the template's
    placement but for the backend:

    host fp32: batch 1, repeat 1: step 10 ms (p10 8, p90 16), phases 3 + 5 + 1, other 1; RSS 100 MiB
                        repeat 2: step 20 ms (p10 19, p90 21), phases 4 + 10 + 2, other 4; RSS 110 MiB
                 point: tokens/s 800 and 400 (8000 ÷ ms): median 600, bars 400–800; memory 105 MiB, 100–110
               batch 2: step 8 ms (p10 4, p90 16): 2000 tokens/s (16000 ÷ 8), bars 1000 (÷ 16) – 4000 (÷ 4);
                        phases 3 + 4 + 2 = 9 > 8: no other, 1 ms over; RSS 120 MiB
               batch 4: skipped, predicted host OOM (✕, OOM); batch 8: failed, crashed (✕, failed)
    device bf16: batch 1: step 2 ms: 4000 tokens/s; phases 1 + 0.5 + 0.25, other 0.25; NVML peak 1 GiB
                          (its host RSS of 500 MiB is not its peak), predicted 1.5 GiB; MFU 12.5 %
                 batch 2: failed, CUDA out of memory (✕, OOM)
    uvm fp32: batch 1 skipped, it does not train (✕, skipped): a line with no point.
    Not in the figures: an inference cell (host fp32 batch 1, 1 ms), and seq 16, where no training cell
    was measured (host fp32 batch 1 failed)."""

    @classmethod
    def build(cls, db):
        ids = {}

        def train(name, backend, dtype, batch, median=None, p10=None, p90=None, phases=(None, None, None),
                  status="ok", reason=None, **fields):
            forward, backward, optimizer = phases
            row = dict(mode="train", model="tiny", seq=8, backend=backend, dtype=dtype, batch=batch, status=status,
                       reason=reason, latency_median_ms=median, latency_p10_ms=p10, latency_p90_ms=p90,
                       forward_ms=forward, backward_ms=backward, optimizer_ms=optimizer, gpu_peak_bytes=None,
                       predicted_peak_bytes=None, mfu_pct=None)
            ids[name] = db.add_cell(**dict(row, **fields))

        train("host1", "host", "fp32", 1, 10.0, 8.0, 16.0, (3.0, 5.0, 1.0), peak_host_rss_bytes=100 * MIB,
              loss_first=6.25, loss_last=5.5, grad_norm_first=2.5, grad_norm_last=1.75)
        train("host1b", "host", "fp32", 1, 20.0, 19.0, 21.0, (4.0, 10.0, 2.0), peak_host_rss_bytes=110 * MIB, repeat=2)
        train("host2", "host", "fp32", 2, 8.0, 4.0, 16.0, (3.0, 4.0, 2.0), peak_host_rss_bytes=120 * MIB)
        train("host4", "host", "fp32", 4, status="skipped", reason="predicted host OOM: it needs 9.0 GiB of host memory")
        train("host8", "host", "fp32", 8, status="failed", reason="crashed (signal 11)")
        train("device1", "device", "bf16", 1, 2.0, 2.0, 2.0, (1.0, 0.5, 0.25), gpu_peak_bytes=GIB,
              predicted_peak_bytes=3 * GIB // 2, peak_host_rss_bytes=500 * MIB, mfu_pct=12.5)
        train("device2", "device", "bf16", 2, status="failed", reason="exit code 1: CUDA error: out of memory")
        train("uvm1", "uvm", "fp32", 1, status="skipped", reason="the uvm backend does not train")
        train("seq16", "host", "fp32", 1, status="failed", reason="crashed", seq=16)
        ids["infer"] = db.add_cell(mode="infer", model="tiny", seq=8, backend="host", dtype="fp32", batch=1,
                                   status="ok", latency_median_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0,
                                   forward_ms=1.0, backward_ms=None, optimizer_ms=None)
        return ids

    def test_points_and_the_batches_marked_not_measured(self):
        data = report_data(self.path)
        panels = training.training_panels(data.cells, data.db.axes)
        self.assertEqual([panel for panel, _ in panels], [("tiny", 8)])  # seq 16 has no measured training cell
        (_, lines), = panels
        self.assertEqual([line.label for line in lines],
                         ["dtype=bf16 backend=device", "dtype=fp32 backend=host", "dtype=fp32 backend=uvm"])
        device, host, uvm = lines
        self.assertEqual(list(host.points["batch"]), [1, 2])
        self.assertEqual(list(host.points["tps"]), [600.0, 2000.0])
        self.assertEqual(list(host.points["tps_lo"]), [400.0, 1000.0])
        self.assertEqual(list(host.points["tps_hi"]), [800.0, 4000.0])
        self.assertEqual(list(host.points["memory"]), [105.0 * MIB, 120.0 * MIB])
        self.assertEqual(list(host.points["memory_lo"]), [100.0 * MIB, 120.0 * MIB])
        self.assertEqual(list(host.points["memory_hi"]), [110.0 * MIB, 120.0 * MIB])
        self.assertEqual(list(host.points["repeats"]), [2, 1])
        self.assertTrue(host.points["predicted"].isna().all())
        self.assertEqual(list(zip(host.marks["batch"], host.marks["kind"])), [(4, "OOM"), (8, "failed")])
        self.assertEqual((list(device.points["tps"]), list(device.points["memory"]), list(device.points["predicted"])),
                         ([4000.0], [float(GIB)], [1.5 * GIB]))
        self.assertEqual(list(zip(device.marks["batch"], device.marks["kind"])), [(2, "OOM")])
        self.assertEqual(len(uvm.points), 0)
        self.assertEqual(list(zip(uvm.marks["batch"], uvm.marks["kind"])), [(1, "skipped")])

    def test_figure_marks_the_batches_at_the_axis_and_says_so(self):
        drawn = self.render(training)
        # The batches span the marked ones too; mode names the training cells.
        self.assertEqual(suptitle(drawn.figure), "tiny bf16/fp32, batch 1–8 × seq 8, mode=train\n"
                                                 "one row of panels per model and seq; lines vary dtype, backend")
        tps_ax, mem_ax = drawn.figure.axes
        self.assertEqual([(x, y) for x, y, _ in errorbar_data(tps_ax)], [([1], [4000.0]), ([1, 2], [600.0, 2000.0])])
        self.assertEqual([y for _, y, _ in errorbar_data(mem_ax)], [[1.0], [105 / 1024, 120 / 1024]])
        self.assertEqual(mem_ax.get_ylabel(), "peak memory (GiB)")  # the device's 1 GiB
        # The ✕ of each line, at the foot of the axis (y 0 in axes coordinates), in both panels.
        for ax in (tps_ax, mem_ax):
            marks = sorted(tuple(p) for c in ax.collections if c.get_offsets().shape[0] and
                           c.get_offset_transform() is ax.get_xaxis_transform() for p in c.get_offsets())
            self.assertEqual(marks, [(1.0, 0.0), (2.0, 0.0), (4.0, 0.0), (8.0, 0.0)])
        self.assertEqual([t.get_text() for t in drawn.figure.legends[0].get_texts()],
                         ["dtype=bf16 backend=device", "dtype=fp32 backend=host", "dtype=fp32 backend=uvm (none measured)",
                          "not measured: OOM, failed or skipped (at the axis)", "predicted peak (GPU cells)"])
        self.assertIn("2 OOM, 1 failed, 1 skipped", drawn.caption)
        self.assertIn("dtype=fp32 backend=host at batch 4 (OOM: predicted host OOM: it needs 9.0 GiB", drawn.caption)

    def test_memory_below_a_gib_in_mib(self):
        db = FixtureDb(self.folder, "host_training.db")
        for batch, rss in ((1, 100 * MIB), (2, 120 * MIB)):
            db.add_cell(mode="train", batch=batch, status="ok", latency_median_ms=1.0, latency_p10_ms=1.0,
                        latency_p90_ms=1.0, peak_host_rss_bytes=rss)
        db.close()
        _, mem_ax = self.render(training, db.path).figure.axes
        self.assertEqual([y for _, y, _ in errorbar_data(mem_ax)], [[100.0, 120.0]])
        self.assertEqual(mem_ax.get_ylabel(), "peak memory (MiB)")

    def test_phase_bars_sum_to_the_step_median(self):
        data = report_data(self.path)
        train = training.training_cells(data.ok)
        bars = training_phases.phase_bars(train[training.measured(train)]).set_index("cell_id")
        other = {name: bars.loc[self.ids[name], "other_ms"] for name in ("host1", "host1b", "host2", "device1")}
        self.assertEqual(other, {"host1": 1.0, "host1b": 4.0, "host2": 0.0, "device1": 0.25})  # 10-9, 20-16, 8<9, 2-1.75
        self.assertEqual(bars.loc[self.ids["host2"], "overrun_ms"], 1.0)  # 3 + 4 + 2 - 8
        self.assertNotIn(self.ids["infer"], bars.index)
        drawn = self.render(training_phases)
        (ax,) = drawn.figure.axes
        widths = {}
        for patch in ax.patches:
            y = round(patch.get_y() + patch.get_height() / 2, 6)
            widths[y] = widths.get(y, 0.0) + patch.get_width()
        # Bars in order: device batch 1, then host batch 1 (repeats 1, 2), batch 2; a group per dtype.
        self.assertEqual(sorted(widths.values()), [2.0, 9.0, 10.0, 20.0])
        self.assertEqual([t.get_text() for t in ax.get_yticklabels()],
                         [f"batch 1 device (cell {self.ids['device1']})",
                          f"batch 1 host repeat 1 (cell {self.ids['host1']})",
                          f"batch 1 host repeat 2 (cell {self.ids['host1b']})",
                          f"batch 2 host repeat 1 (cell {self.ids['host2']})"])
        self.assertIn(f"in 1 cell they add up to more than the step's median (by up to 1 ms, cell {self.ids['host2']})",
                      drawn.caption)

    def test_left_out_without_a_measured_training_cell(self):
        db = FixtureDb(self.folder, "no_training.db")
        db.add_cell(mode="infer", status="ok", latency_median_ms=1.0)
        db.add_cell(mode="train", batch=2, status="skipped", reason="the uvm backend does not train", backend="uvm")
        db.close()
        for module in (training, training_phases):
            with self.assertRaisesRegex(Skip, r"^the database has no measured training cell \(mode = \"train\", "
                                              r"status ok\)"):
                module.render(report_data(db.path))

    def test_forward_throughput_leaves_training_cells_out(self):
        """The host training cells span batch 1 and 2, but the forward figure has only the inference cell."""
        with self.assertRaisesRegex(Skip, r"no model's forward \(mode = \"infer\"\)"):
            throughput.render(report_data(self.path))

    def test_cell_table_shows_the_training_columns_for_training_cells(self):
        results = ResultsDb(self.path)
        headings, rows = cell_table(results.cells(), results.axes)
        names = [h for h, _ in headings]
        by_id = {r[names.index("cell")].text: dict(zip(names, r)) for r in rows}
        host1, infer, device1 = (by_id[str(self.ids[n])] for n in ("host1", "infer", "device1"))
        self.assertEqual((host1["loss first → last"].text, host1["loss first → last"].number), ("6.25 → 5.5", 5.5))
        self.assertEqual(host1["grad norm first → last"].text, "2.5 → 1.75")
        self.assertEqual([host1[h].text for h in ("forward ms", "backward ms", "optimizer ms")], ["3", "5", "1"])
        self.assertEqual(infer["forward ms"].text, "–")  # an inference cell's forward is its latency
        self.assertEqual(device1["MFU %"].text, "12.5")
        self.assertEqual(host1["MFU %"].text, "–")
        self.assertIn("A training cell's latency is its step's", html_page.cells_section(results.cells(), results.axes))

    def test_cell_table_without_training_cells_has_no_training_columns(self):
        db = FixtureDb(self.folder, "inference_only.db")
        db.add_cell(mode="infer", status="ok", latency_median_ms=1.0, forward_ms=1.0)
        db.close()
        results = ResultsDb(db.path)
        headings, _ = cell_table(results.cells(), results.axes)
        names = [h for h, _ in headings]
        for heading in ("forward ms", "backward ms", "optimizer ms", "loss first → last", "grad norm first → last"):
            self.assertNotIn(heading, names)
        self.assertNotIn("training cell", html_page.cells_section(results.cells(), results.axes))


class TrainingSweetspotTest(DbTest):
    """Training cells of the tiny model, bf16, seq 8 (8 tokens a sequence), on the device backend in
    two variants; the run's GPU has 8 GiB. Every measured cell holds weights 0.5 GiB and training
    state 0.5 GiB; A: its activation_bytes, P: its predicted peak, predicted allocations 1 + A GiB
    but where said (GiB unless said; tokens/s = batch × 8 × 1000 ÷ the step's ms):

    baseline b1: 2 ms, 4000 tokens/s; peak 2; A 0.75; P 2 → context 2 − 1.75 = 0.25
             b2: 2 ms, 8000; peak 3; A 1.75; P 3 GiB + 30 MiB → context 286 MiB; error +30 MiB ÷ 3 GiB = +1.0 %
             b4: 4 ms, 8000; peak 5; A 3.75; no P (no calibration): no context part
                 repeat 2: the same, with none of its parts stored: a point, but no bars
             b8: skipped, predicted OOM at P 9 (✕ at 9)
    attn_ln b1: 2.5 ms, 3200; peak 1.5; A 0.25; P 1.5 → 0.25; predicted allocations 1.25 GiB + 1 MiB
            b2: 1.25 ms, 12800; peak 2.5; A 1.25; P 2.5 → 0.25
            b4 repeat 1: 2 ms, 16000; peak 4; A 2.75; P 4 → 0.25
               repeat 2: 2.5 ms, 12800; peak 4.5; A 2.75; P 3.5 < 3.75: no context part, 0.25 GiB over
               point: 14400 tokens/s (the median of 16000 and 12800), peak 4.25 (of 4 and 4.5)
            b8: failed, CUDA out of memory, P 8 (✕ at 8)
    Front (GiB: tokens/s): 1.5: 3200 (attn_ln 1), 2: 4000 (baseline 1), 2.5: 12800 (attn_ln 2),
    4.25: 14400 (attn_ln 4); baseline 2 (3 GiB, 8000) and 4 (5 GiB, 8000) are beaten by attn_ln 2.
    Not drawn: seq 16, whose one cell was skipped as predicted OOM (no point: the caption names it),
    a host training cell (no device peak), a uvm cell skipped for another reason, an inference cell."""

    @classmethod
    def build(cls, db):
        db.set_run(gpu_memory_bytes=8 * GIB)
        ids = {}

        def train(name, variant, batch, ms=None, peak=None, activations=None, predicted=None, status="ok", reason=None,
                  **fields):
            row = dict(mode="train", model="tiny", seq=8, backend="device", variant=variant, dtype="bf16", batch=batch,
                       status=status, reason=reason, latency_median_ms=ms, latency_p10_ms=ms, latency_p90_ms=ms,
                       gpu_peak_bytes=peak, predicted_peak_bytes=predicted, device_weight_bytes=None,
                       training_state_bytes=None, activation_bytes=None, predicted_alloc_bytes=None)
            if activations is not None:
                row.update(device_weight_bytes=GIB // 2, training_state_bytes=GIB // 2, activation_bytes=activations,
                           predicted_alloc_bytes=GIB + activations)
            ids[name] = db.add_cell(**dict(row, **fields))

        train("base1", "baseline", 1, 2.0, 2 * GIB, 3 * GIB // 4, 2 * GIB)
        train("base2", "baseline", 2, 2.0, 3 * GIB, 7 * GIB // 4, 3 * GIB + 30 * MIB)
        train("base4", "baseline", 4, 4.0, 5 * GIB, 15 * GIB // 4, None)
        train("base4b", "baseline", 4, 4.0, 5 * GIB, repeat=2)  # the same again, its parts not stored
        train("base8", "baseline", 8, predicted=9 * GIB, status="skipped",
              reason="predicted OOM: it needs 9.0 GiB, above the 8.0 GiB the GPU has")
        train("attn1", "attn_ln", 1, 2.5, 3 * GIB // 2, GIB // 4, 3 * GIB // 2, predicted_alloc_bytes=5 * GIB // 4 + MIB)
        train("attn2", "attn_ln", 2, 1.25, 5 * GIB // 2, 5 * GIB // 4, 5 * GIB // 2)
        train("attn4", "attn_ln", 4, 2.0, 4 * GIB, 11 * GIB // 4, 4 * GIB)
        train("attn4b", "attn_ln", 4, 2.5, 9 * GIB // 2, 11 * GIB // 4, 7 * GIB // 2, repeat=2)
        train("attn8", "attn_ln", 8, predicted=8 * GIB, status="failed", reason="exit code 1: CUDA error: out of memory")
        train("seq16", "baseline", 1, predicted=20 * GIB, status="skipped", reason="predicted OOM: it needs 20 GiB",
              seq=16)
        train("host", "baseline", 1, 10.0, backend="host", peak_host_rss_bytes=GIB)
        train("uvm", "baseline", 1, status="skipped", reason="the uvm backend does not train", backend="uvm",
              predicted=GIB)
        ids["infer"] = db.add_cell(mode="infer", model="tiny", seq=8, backend="device", dtype="bf16", batch=1,
                                   status="ok", latency_median_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0,
                                   gpu_peak_bytes=GIB)
        return ids

    def test_points_front_and_the_batches_that_did_not_fit(self):
        data = report_data(self.path)
        spot = training_sweetspot.sweetspot(data.cells, data.db.axes)
        self.assertEqual([panel.label for panel in spot.panels], ["tiny bf16, seq 8"])
        self.assertEqual(spot.unmeasured, [("tiny bf16, seq 16", 1)])
        (panel,) = spot.panels
        self.assertEqual([s.label for s in panel.settings], ["device, attn_ln", "device, baseline"])
        attn, base = panel.settings
        self.assertEqual(attn.points[["batch", "memory", "tps", "repeats"]].values.tolist(),
                         [[1, 1.5 * GIB, 3200.0, 1], [2, 2.5 * GIB, 12800.0, 1], [4, 4.25 * GIB, 14400.0, 2]])
        self.assertEqual(base.points[["batch", "memory", "tps"]].values.tolist(),
                         [[1, 2.0 * GIB, 4000.0], [2, 3.0 * GIB, 8000.0], [4, 5.0 * GIB, 8000.0]])
        self.assertEqual(list(zip(attn.misses["batch"], attn.misses["predicted"])), [(8, 8.0 * GIB)])
        self.assertEqual(list(zip(base.misses["batch"], base.misses["predicted"])), [(8, 9.0 * GIB)])
        expected = [(1.5 * GIB, 3200.0, "device, attn_ln", 1), (2.0 * GIB, 4000.0, "device, baseline", 1),
                    (2.5 * GIB, 12800.0, "device, attn_ln", 2), (4.25 * GIB, 14400.0, "device, attn_ln", 4)]
        front = list(panel.front[["memory", "tps", "setting", "batch"]].itertuples(index=False, name=None))
        self.assertEqual(front, expected)
        # The same front by its definition: the points no other point matches in tokens/s with no more memory.
        points = [(m, t, s.label, b) for s in panel.settings for b, m, t in zip(s.points["batch"], s.points["memory"],
                                                                             s.points["tps"])]
        beaten = {p for p in points for q in points if q != p and q[0] <= p[0] and q[1] >= p[1]}
        self.assertEqual(sorted(set(points) - beaten), expected)
        self.assertEqual(panel.capacity, [8 * GIB])

    def test_figure_draws_the_settings_front_misses_and_the_gpu_memory(self):
        drawn = self.render(training_sweetspot)
        (ax,) = drawn.figure.axes
        lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}
        self.assertEqual(lines["device, attn_ln"], ([1.5, 2.5, 4.25], [3200.0, 12800.0, 14400.0]))
        self.assertEqual(lines["device, baseline"], ([2.0, 3.0, 5.0], [4000.0, 8000.0, 8000.0]))
        # The front holds from its last point to the most memory measured (baseline's 5 GiB).
        self.assertEqual(lines["Pareto front"], ([1.5, 2.0, 2.5, 4.25, 5.0], [3200.0, 4000.0, 12800.0, 14400.0, 14400.0]))
        self.assertEqual(lines["GPU memory"][0], [8.0, 8.0])
        marks = sorted(tuple(p) for c in ax.collections if c.get_offset_transform() is ax.get_xaxis_transform()
                       for p in c.get_offsets())
        self.assertEqual(marks, [(8.0, 0.0), (9.0, 0.0)])  # at their predicted peaks, the foot of the axis
        self.assertEqual(ax.get_xlabel(), "peak device memory (GiB)")
        self.assertEqual(ax.get_ylabel(), "training throughput (tokens/s)")
        self.assertEqual([t.get_text() for t in drawn.figure.legends[0].get_texts()],
                         ["device, attn_ln", "device, baseline", "Pareto front: the most tokens/s within the memory",
                          "did not fit: at its predicted peak (foot of the axis)", "the GPU's memory"])
        self.assertEqual(suptitle(drawn.figure), "tiny bf16, batch 1–8 × seq 8–16, mode=train\n"
                                                 "one panel per workload; one line per setting (backend, variant), "
                                                 "its batches in order")
        self.assertIn("2 batches that did not run or ran out of memory", drawn.caption)
        self.assertIn("device, baseline at batch 8 (predicted OOM: it needs 9.0 GiB", drawn.caption)
        self.assertIn("No batch measured, so no panel: tiny bf16, seq 16 (1 cell that did not fit).", drawn.caption)
        self.assertIn("(gpu_memory_bytes, 8.0 GiB)", drawn.caption)

    def test_memory_bars_stack_to_the_predicted_peak_beside_the_measured_one(self):
        data = report_data(self.path)
        panels, left_out, without_terms = training_memory.memory_panels(data.cells, data.db.axes)
        self.assertEqual((left_out, without_terms), (0, 1))  # the cell without its parts
        self.assertEqual([(label, [s for s, _ in groups]) for label, groups in panels],
                         [("tiny bf16, seq 8", ["device, attn_ln", "device, baseline"])])
        cells = pd.concat([g for _, g in panels[0][1]]).set_index("cell_id")
        names = ["attn1", "attn2", "attn4", "attn4b", "base1", "base2", "base4"]
        self.assertEqual(list(cells.index), [self.ids[n] for n in names])  # by setting, then batch and repeat
        fixed = [cells.loc[self.ids[n], "fixed_bytes"] for n in names]
        self.assertEqual(fixed[:6], [GIB / 4, GIB / 4, GIB / 4, 0.0, GIB / 4, GIB / 4 + 30 * MIB])
        self.assertTrue(math.isnan(fixed[6]))
        self.assertEqual(cells.loc[self.ids["attn4b"], "overrun_bytes"], GIB / 4)  # 3.75 − 3.5 GiB

        drawn = self.render(training_memory)
        (ax,) = drawn.figure.axes
        ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}

        def widths(y):
            return sum(p.get_width() for p in ax.patches if abs(p.get_y() + p.get_height() / 2 - y) < 1e-6)

        # Above each tick the predicted stack (GiB): the predicted peak, or the parts where there is
        # none or they pass it; below, the measured peak.
        stacks = {"attn1": 1.5, "attn2": 2.5, "attn4": 4.0, "attn4b": 3.75, "base1": 2.0, "base2": 3 + 30 / 1024,
                  "base4": 4.75}
        peaks = {"attn1": 1.5, "attn2": 2.5, "attn4": 4.0, "attn4b": 4.5, "base1": 2.0, "base2": 3.0, "base4": 5.0}
        for name in names:
            cell = self.ids[name]
            (y,) = [y for text, y in ticks.items() if text.endswith(f"(cell {cell})")]
            self.assertAlmostEqual(widths(y - training_memory.BAR / 2), stacks[name], places=9, msg=name)
            self.assertAlmostEqual(widths(y + training_memory.BAR / 2), peaks[name], places=9, msg=name)
        self.assertIn(f"batch 4 repeat 2 (cell {self.ids['attn4b']})", ticks)
        self.assertEqual(ax.get_xlabel(), "device memory (GiB)")
        texts = [t.get_text() for t in ax.texts]
        self.assertIn("+1.0 %", texts)  # base2: +30 MiB ÷ 3 GiB
        self.assertIn("-22.2 %", texts)  # attn4b: (3.5 − 4.5) ÷ 4.5
        self.assertIn(f"differ from those parts' sum in 1 cell (by up to 1.0 MiB, cell {self.ids['attn1']})",
                      drawn.caption)
        self.assertIn("1 cell had no predicted peak", drawn.caption)
        self.assertIn(f"by up to 256.0 MiB, cell {self.ids['attn4b']}", drawn.caption)
        self.assertIn("Every cell has the estimator's prediction as totals only", drawn.caption)  # no terms stored
        self.assertIn("1 more cell not drawn: neither the estimator's terms nor the harness's accounting", drawn.caption)

    def test_memory_bars_beyond_the_most_a_panel_holds_are_left_out(self):
        data = report_data(self.path)
        with unittest.mock.patch.object(training_memory, "MAX_CELLS", 2):
            panels, left_out, _ = training_memory.memory_panels(data.cells, data.db.axes)
        # attn_ln's batches 1 and 2 are kept; its two batch-4 cells and baseline's three are not.
        self.assertEqual(left_out, 5)
        ((_, groups),) = panels
        self.assertEqual([(s, list(g["cell_id"])) for s, g in groups],
                         [("device, attn_ln", [self.ids["attn1"], self.ids["attn2"]])])

    def test_a_new_placement_axis_is_a_setting_and_a_new_workload_axis_a_panel(self):
        """Axes the figures do not name, described in the database's `axes` table: `optimizer_test`
        (placement) tells settings apart, `recompute_test` (workload) workloads."""
        db = FixtureDb(self.folder, "new_axes.db")
        db.set_run(gpu_memory_bytes=80 * GIB)
        for name, role in (("optimizer_test", "placement"), ("recompute_test", "workload")):
            db.con.execute(f"ALTER TABLE cells ADD COLUMN {name} TEXT")
            db.insert("axes", dict(name=name, column_name=name, type="text", role=role, in_matrix=1, keyed="no",
                                   default_value="", unit="", since=99, meaning="a test's axis"))
        for optimizer, recompute, batch, peak in (("device", "none", 1, GIB), ("host", "none", 1, GIB // 2),
                                                  ("host", "none", 2, GIB), ("device", "block", 1, GIB // 2)):
            db.add_cell(mode="train", backend="device", variant="baseline", dtype="bf16", seq=8, batch=batch,
                        status="ok", latency_median_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0, gpu_peak_bytes=peak,
                        optimizer_test=optimizer, recompute_test=recompute, device_weight_bytes=0, training_state_bytes=0,
                        activation_bytes=0, predicted_peak_bytes=peak)
        db.close()
        data = report_data(db.path)
        spot = training_sweetspot.sweetspot(data.cells, data.db.axes)
        self.assertEqual([(p.label, [s.label for s in p.settings]) for p in spot.panels],
                         [("tiny bf16, seq 8, recompute_test block", ["device, baseline, optimizer_test device"]),
                          ("tiny bf16, seq 8, recompute_test none", ["device, baseline, optimizer_test device",
                                                                     "device, baseline, optimizer_test host"])])
        panels, _, _ = training_memory.memory_panels(data.cells, data.db.axes)
        self.assertEqual([len(groups) for _, groups in panels], [1, 2])
        # The points stay at 1 GiB, below half the GPU's 80 GiB: the line would squeeze them, so the caption says it.
        self.assertEqual([training_sweetspot.shown_capacity(p) for p in spot.panels], [[], []])
        drawn = self.render(training_sweetspot, db.path)
        self.assertEqual([line.get_label() for ax in drawn.figure.axes for line in ax.get_lines()
                          if line.get_label() == "GPU memory"], [])
        self.assertIn("The GPU's memory (80.0 GiB) is not drawn where a panel's points stay below 50% of it.",
                      drawn.caption)

    def test_left_out_without_a_measured_training_cell_of_a_gpu_backend(self):
        """The host training cells have no device peak."""
        db = FixtureDb(self.folder, "host_training.db")
        db.add_cell(mode="train", backend="host", status="ok", latency_median_ms=1.0, latency_p10_ms=1.0,
                    latency_p90_ms=1.0, peak_host_rss_bytes=GIB)
        db.close()
        with self.assertRaisesRegex(Skip, r"^the database has no measured training cell with a peak device memory"):
            training_sweetspot.render(report_data(db.path))
        with self.assertRaisesRegex(Skip, r"^the database has no measured training cell of a GPU backend"):
            training_memory.render(report_data(db.path))



def bar_parts(ax):
    """{y of a bar's centre: [(legend label, width)] left to right}: each bar of a horizontal bar figure."""
    bars = {}
    for container in ax.containers:
        for patch in container.patches:
            y = round(patch.get_y() + patch.get_height() / 2, 6)
            bars.setdefault(y, []).append((patch.get_x(), container.get_label(), patch.get_width()))
    return {y: [(label, width) for _, label, width in sorted(parts)] for y, parts in bars.items()}


class TrainingMemoryTermsTest(DbTest):
    """Training cells of the device backend (tiny bf16, seq 8) with the estimator's terms of its
    predicted allocations (schema 18), in MiB: W weights, S training state, A activations, Sc scores,
    Ws workspace, C prefix check step; alloc = W + S + max(A + Sc + Ws, C); P predicted peak;
    measured: the accounted weights, state and activations, and the NVML peak.

    b1: W 512, S 1024, A 300, Sc 100, Ws 32, C 200 < 432: alloc 1968, P 2468 → context 500;
        measured 512, 1024, 420, peak 2500 → the rest 2500 − 1956 = 544
    b2: W 512, S 1024, A 100, Sc 50, Ws 32, C 600 > 182: the check step in place of the three;
        alloc 2136, P 2536 → context 400; measured 512, 1024, 150, peak 2700 → the rest 1014
    b4: W 512, S 1024, A 600, Sc 200, Ws 32, C 200: alloc 2368, no P (no context part);
        its accounting not stored: the measured bar is its peak of 3000 alone
    b8: no terms (a cell of an older harness): the accounted 512, 1024, 1000 above, then
        P 3036 − 2536 = 500; the measured bar is its peak of 3100 alone"""

    @classmethod
    def build(cls, db):
        ids = {}

        def train(name, batch, peak, terms=None, accounted=None, alloc=None, predicted=None):
            row = dict(mode="train", model="tiny", seq=8, backend="device", variant="baseline", dtype="bf16",
                       batch=batch, status="ok", reason=None, latency_median_ms=1.0, latency_p10_ms=1.0,
                       latency_p90_ms=1.0, gpu_peak_bytes=peak * MIB, predicted_peak_bytes=predicted and predicted * MIB,
                       predicted_alloc_bytes=alloc * MIB)
            for column, value in zip(training_memory.TERMS, terms or (None,) * 6):
                row[column] = value and value * MIB
            for column, value in zip(("device_weight_bytes", "training_state_bytes", "activation_bytes"),
                                     accounted or (None,) * 3):
                row[column] = value and value * MIB
            ids[name] = db.add_cell(**row)

        train("b1", 1, 2500, (512, 1024, 300, 100, 32, 200), (512, 1024, 420), alloc=1968, predicted=2468)
        train("b2", 2, 2700, (512, 1024, 100, 50, 32, 600), (512, 1024, 150), alloc=2136, predicted=2536)
        train("b4", 4, 3000, (512, 1024, 600, 200, 32, 200), alloc=2368)
        train("b8", 8, 3100, accounted=(512, 1024, 1000), alloc=2536, predicted=3036)
        return ids

    def drawn_bars(self, path=None):
        """(the caption, {cell name: (its predicted bar, its measured bar)} in MiB) as drawn."""
        drawn = self.render(training_memory, path)
        (ax,) = drawn.figure.axes
        self.assertEqual(ax.get_xlabel(), "device memory (GiB)")
        bars = bar_parts(ax)
        by_cell = {}
        for text, y in zip([t.get_text() for t in ax.get_yticklabels()], ax.get_yticks()):
            cell = int(re.search(r"\(cell (\d+)\)$", text).group(1))
            by_cell[cell] = tuple([(label, round(width * 1024, 6)) for label, width in bars[round(y + dy, 6)]]
                                  for dy in (-training_memory.BAR / 2, training_memory.BAR / 2))
        return drawn.caption, by_cell

    def test_the_predicted_bar_stacks_the_estimators_terms_and_the_measured_bar_the_accounting(self):
        weights, state = "weights", "training state (gradients, fp32 master weights, AdamW moments)"
        activations, workspace = "kept activations and scratch", "GEMM workspace"
        context, rest = "CUDA context and libraries: the rest of the predicted peak", "the rest of the measured peak (NVML)"
        caption, bars = self.drawn_bars()
        b1, b4 = bars[self.ids["b1"]], bars[self.ids["b4"]]
        # b1's context: P − alloc = 2468 − 1968; the rest of its measured peak 2500 − (512 + 1024 + 420).
        self.assertEqual(b1, ([(weights, 512), (state, 1024), (activations, 300 + 100), (workspace, 32), (context, 500)],
                              [(weights, 512), (state, 1024), (activations, 420), (rest, 544)]))
        # No predicted peak: the bar stops at the terms; no accounting: the measured peak alone.
        self.assertEqual(b4, ([(weights, 512), (state, 1024), (activations, 800), (workspace, 32)],
                              [("measured peak (NVML)", 3000)]))
        data = report_data(self.path)
        cells, without_parts = training_memory.memory_cells(data.cells)
        cells = cells.set_index("cell_id")
        self.assertEqual(without_parts, 0)
        self.assertEqual(cells.loc[self.ids["b1"], "fixed_bytes"], (2468 - 1968) * MIB)
        self.assertEqual(cells.loc[self.ids["b2"], "fixed_bytes"], (2536 - 2136) * MIB)
        self.assertEqual([bool(cells.loc[self.ids[n], "from_terms"]) for n in ("b1", "b2", "b4", "b8")],
                         [True, True, True, False])
        self.assertIn("In 3 cells the parts above are the estimator's own terms", caption)
        self.assertIn("1 cell's measured bar is not split", caption)
        self.assertIn("1 cell has the estimator's prediction as totals only", caption)
        self.assertIn("Their predicted allocations (predicted_alloc_bytes) equal those parts' sum in every cell.",
                      caption)  # b8: 512 + 1024 + 1000 = 2536
        self.assertIn("1 cell had no predicted peak", caption)
        texts = [t.get_text() for t in self.render(training_memory).figure.axes[0].texts]
        self.assertIn("-1.3 %", texts)  # b1: (2468 − 2500) ÷ 2500 = −1.28 %

    def test_a_check_step_larger_than_the_steps_activations_takes_their_place(self):
        caption, bars = self.drawn_bars()
        # b2: C 600 > A + Sc + Ws = 100 + 50 + 32; context 2536 − (512 + 1024 + 600).
        self.assertEqual(bars[self.ids["b2"]][0],
                         [("weights", 512), ("training state (gradients, fp32 master weights, AdamW moments)", 1024),
                          ("prefix check step (replaces activations and workspace)", 600),
                          ("CUDA context and libraries: the rest of the predicted peak", 400)])
        self.assertIn("In 1 cell the prefix check step (predicted_check_step_bytes, freed before the cell's own step) "
                      "needs more than the activations, scores and workspace together", caption)

    def test_a_database_without_the_terms_stacks_the_accounting(self):
        """A database from before schema 18: no term columns at all."""
        db = FixtureDb(self.folder, "no_terms.db")
        for column in training_memory.TERMS:
            db.con.execute(f"ALTER TABLE cells DROP COLUMN {column}")
            del db.cell_template[column]
        ids = [db.add_cell(mode="train", backend="device", dtype="bf16", seq=8, batch=batch, status="ok",
                           latency_median_ms=1.0, latency_p10_ms=1.0, latency_p90_ms=1.0, gpu_peak_bytes=peak * MIB,
                           device_weight_bytes=512 * MIB, training_state_bytes=1024 * MIB,
                           activation_bytes=activations * MIB, predicted_alloc_bytes=(1536 + activations) * MIB,
                           predicted_peak_bytes=predicted * MIB)
               for batch, activations, predicted, peak in ((1, 400, 2436, 2500), (2, 800, 2836, 2800))]
        db.close()
        caption, bars = self.drawn_bars(db.path)
        state = "training state (gradients, fp32 master weights, AdamW moments)"
        context = "CUDA context and libraries: the rest of the predicted peak"
        # The rest of each predicted peak: 2436 − (512 + 1024 + 400), 2836 − (512 + 1024 + 800).
        self.assertEqual(bars[ids[0]], ([("weights", 512), (state, 1024), ("kept activations and scratch", 400),
                                         (context, 500)], [("measured peak (NVML)", 2500)]))
        self.assertEqual(bars[ids[1]], ([("weights", 512), (state, 1024), ("kept activations and scratch", 800),
                                         (context, 500)], [("measured peak (NVML)", 2800)]))
        self.assertIn("Every cell has the estimator's prediction as totals only", caption)
        self.assertNotIn("the estimator's own terms", caption)


# --- ragged batches: the packing figure and scripts/bench/pytorch_packing.py -----------------------

class PackingFigureTest(DbTest):
    """Forwards of ragged batches (schema 26 on), the template's placement but for what is named:

    llama_1b bf16 device, lognormal:330,0.85, 4000 real tokens a batch:
      batch 16 padded: 2.0 ms (p10 1.6, p90 2.5): 2e6 tokens/s (4000 ÷ 2 ms), bars 1.6e6–2.5e6; peak 10 GiB;
                       60 % padding
               packed: repeat 1 0.8 ms: 5e6; repeat 2 1.0 ms: 4e6: median 4.5e6, bars 4e6–5e6; peak 6 GiB
                       (both repeats): tokens/s ×2.25, memory ×0.6
      batch 32 padded only: 4.0 ms: 8000 real tokens → 2e6 tokens/s; no ratio
    tiny fp32 host, uniform:2-16, batch 4, 40 real tokens: padded 0.5 ms (80000 tokens/s), RSS 200 MiB;
      packed 0.4 ms (100000 tokens/s), RSS 150 MiB: ×1.25 and ×0.75
    Not drawn: a fixed-lengths cell, a failed ragged cell; and two settings measured packed alone, left
    out for having no padded bar: a ragged cell of seed 2, and the varlen-overhead pair's packed 32
    sequences of uniform:316-324 (seq 324; its rectangular 32 × 320 is fixed-lengths, no ragged cell).
    With seed 2 left out the seed no longer tells the drawn panels apart, so the labels do not name it."""

    @classmethod
    def build(cls, db):
        ids = {}
        llama = dict(model="llama_1b", dtype="bf16", seq=2048, lengths="lognormal:330,0.85", real_tokens=4000)

        def ragged(name, backend, batch, packing, median, p10=None, p90=None, **fields):
            ids[name] = gpu_cell(db, backend, batch=batch, packing=packing, latency_median_ms=median,
                                 latency_p10_ms=p10 or median, latency_p90_ms=p90 or median, **fields)

        ragged("padded16", "device", 16, "padded", 2.0, 1.6, 2.5, gpu_peak_bytes=10 * GIB, padding_share=0.6, **llama)
        ragged("packed16", "device", 16, "packed", 0.8, gpu_peak_bytes=6 * GIB, padding_share=0.0, **llama)
        ragged("packed16b", "device", 16, "packed", 1.0, gpu_peak_bytes=6 * GIB, padding_share=0.0, repeat=2, **llama)
        ragged("padded32", "device", 32, "padded", 4.0, gpu_peak_bytes=12 * GIB, padding_share=0.5,
               **dict(llama, real_tokens=8000))
        ragged("seed2", "device", 16, "packed", 1.0, gpu_peak_bytes=6 * GIB, seed=2, **llama)
        ragged("failed", "device", 64, "packed", None, status="failed", **llama)
        host = dict(model="tiny", dtype="fp32", seq=16, lengths="uniform:2-16", real_tokens=40, gpu_peak_bytes=None)
        ragged("host_padded", "host", 4, "padded", 0.5, peak_host_rss_bytes=200 * MIB, padding_share=0.5, **host)
        ragged("host_packed", "host", 4, "packed", 0.4, peak_host_rss_bytes=150 * MIB, padding_share=0.0, **host)
        ids["fixed"] = gpu_cell(db, "device", model="llama_1b", dtype="bf16", batch=16, seq=2048, latency_median_ms=9.0)
        ragged("varlen", "device", 32, "packed", 1.0, gpu_peak_bytes=3 * GIB, padding_share=0.0,
               **dict(llama, seq=324, lengths="uniform:316-324", real_tokens=10233))
        gpu_cell(db, "device", model="llama_1b", dtype="bf16", batch=32, seq=320, latency_median_ms=1.0)
        return ids

    def panels(self):
        data = report_data(self.path)
        return packing.packing_panels(data.ok, data.db.axes)

    def bar(self, panel, batch, which):
        bars = panel.bars.set_index(["batch", "packing"])
        return bars.loc[(batch, which)]

    def test_throughput_counts_a_ragged_batch_by_its_real_tokens(self):
        points = throughput.throughput(report_data(self.path).ok).set_index("cell_id")
        self.assertAlmostEqual(points.loc[self.ids["padded16"], "tps"], 2e6)  # 4000 / 2 ms, not 16 × 2048
        self.assertAlmostEqual(points.loc[self.ids["padded16"], "tps_lo"], 1.6e6)  # 4000 / 2.5 ms
        self.assertAlmostEqual(points.loc[self.ids["fixed"], "tps"], 16 * 2048 / 9.0e-3)

    def test_one_panel_per_setting_a_pair_of_bars_per_batch(self):
        panels, left_out, unpaired, named = self.panels()
        self.assertEqual(left_out, 0)
        self.assertEqual(unpaired, 2)  # seed 2's panel and the varlen-overhead pair's packed batch
        self.assertEqual(named, ["model", "lengths", "backend", "dtype", "seq"])
        self.assertEqual([p.label for p in panels],
                         ["llama_1b, lognormal:330,0.85\nbackend device, dtype bf16, seq 2048",
                          "tiny, uniform:2-16\nbackend host, dtype fp32, seq 16"])
        llama, host = panels
        self.assertEqual(sorted(set(llama.bars["batch"])), [16, 32])  # the failed batch 64 has no bar
        padded = self.bar(llama, 16, "padded")
        self.assertAlmostEqual(padded["tps"], 2e6)
        self.assertAlmostEqual(padded["tps_lo"], 1.6e6)
        self.assertAlmostEqual(padded["tps_hi"], 2.5e6)  # 4000 / 1.6 ms
        self.assertEqual(padded["memory"], 10 * GIB)
        packed = self.bar(llama, 16, "packed")
        self.assertEqual(packed["repeats"], 2)
        self.assertAlmostEqual(packed["tps"], 4.5e6)  # median of 5e6 and 4e6
        self.assertAlmostEqual(packed["tps_lo"], 4e6)
        self.assertAlmostEqual(packed["tps_hi"], 5e6)
        self.assertAlmostEqual(llama.ratio(16, "tps"), 2.25)
        self.assertAlmostEqual(llama.ratio(16, "memory"), 0.6)
        self.assertIsNone(llama.ratio(32, "tps"))  # padded alone
        self.assertEqual(packing.tick(llama, 16), "16\n60 % padding")
        self.assertAlmostEqual(host.ratio(4, "tps"), 1.25)  # 100000 / 80000
        self.assertAlmostEqual(host.ratio(4, "memory"), 0.75)  # RSS 150 / 200 MiB
        self.assertEqual(packing.memory_label(host), "peak host RSS")
        self.assertEqual(packing.memory_label(llama), "peak GPU memory")

    def test_figure_draws_the_bars_and_says_what_they_are(self):
        drawn = self.render(packing)
        axes = drawn.figure.axes
        self.assertEqual(len(axes), 4)  # two rows of panels
        self.assertIn("padded against packed; one row of panels per model, lengths, backend, dtype, seq",
                      suptitle(drawn.figure))
        tps, memory = axes[0], axes[1]
        heights = sorted(round(p.get_height()) for p in tps.patches)
        self.assertEqual(heights, [2_000_000, 2_000_000, 4_500_000])  # padded 16, padded 32, packed 16
        self.assertEqual(sorted(p.get_height() for p in memory.patches), [6.0, 10.0, 12.0])  # GiB
        self.assertIn("×2.25", [t.get_text() for t in tps.texts])
        self.assertIn("×0.60", [t.get_text() for t in memory.texts])
        self.assertEqual(axes[3].get_ylabel(), "peak host RSS (MiB)")
        self.assertIn("(2 rows, 5 bars, 2 batches with both)", drawn.caption)  # llama 3 bars, host 2
        self.assertIn("2 rows not drawn for having no padded cell", drawn.caption)
        self.assertNotIn("more row", drawn.caption)
        self.assertIn("real_tokens ÷ the median latency", drawn.caption)

    def test_left_out_without_ragged_cells(self):
        db = FixtureDb(self.folder, "fixed_only.db")
        gpu_cell(db, "device")
        db.close()
        with self.assertRaisesRegex(Skip, "no measured forward of a ragged batch"):
            packing.render(report_data(db.path))

    def test_left_out_with_packed_batches_alone(self):
        db = FixtureDb(self.folder, "packed_only.db")
        gpu_cell(db, "device", batch=32, seq=324, lengths="uniform:316-324", packing="packed", real_tokens=10233)
        gpu_cell(db, "device", batch=32, seq=320)
        db.close()
        with self.assertRaisesRegex(Skip, r"run packed alone \(1 setting with no padded cell\)"):
            packing.render(report_data(db.path))


PYTORCH_PACKING = REPO / "scripts" / "bench" / "pytorch_packing.py"


def without_torch():
    """sys.modules with torch and transformers not importable, as on every machine but the GPU's."""
    return unittest.mock.patch.dict(sys.modules, {"torch": None, "transformers": None})


class PytorchPackingTest(DbTest):
    """scripts/bench/pytorch_packing.py reads the batches sweetspot's ragged cells ran (cells.drawn_lengths)
    and its options without torch, which only the GPU machine has. Cells: llama_1b bf16 padded and packed
    of one draw (330,12,871), a packed one of another seed (5,9,1), the first draw in fp32, a failed ragged
    cell (7,7,7) and a fixed one."""

    @classmethod
    def build(cls, db):
        ragged = dict(model="llama_1b", dtype="bf16", batch=3, seq=2048, lengths="lognormal:330,0.85")
        return {
            "padded": gpu_cell(db, "device", packing="padded", drawn_lengths="330,12,871", **ragged),
            "packed": gpu_cell(db, "device", packing="packed", drawn_lengths="330,12,871", **ragged),
            "seed2": gpu_cell(db, "device", packing="packed", drawn_lengths="5,9,1", seed=2, **ragged),
            "fp32": gpu_cell(db, "device", packing="padded", drawn_lengths="330,12,871", **dict(ragged, dtype="fp32")),
            "failed": gpu_cell(db, "device", status="failed", drawn_lengths="7,7,7", **dict(ragged, batch=4)),
            "fixed": gpu_cell(db, "device", model="llama_1b", drawn_lengths=None),
        }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        spec = importlib.util.spec_from_file_location("pytorch_packing", PYTORCH_PACKING)
        cls.script = importlib.util.module_from_spec(spec)
        with without_torch():
            spec.loader.exec_module(cls.script)

    def run_script(self, *args):
        """The script run as a program where torch cannot be imported: (exit code, stdout + stderr)."""
        code = ("import runpy, sys; sys.modules.update(torch=None, transformers=None); "
                f"sys.argv = {[str(PYTORCH_PACKING), *args]!r}; runpy.run_path(sys.argv[0], run_name='__main__')")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    def test_each_draw_of_the_ok_ragged_cells_once_naming_its_cells(self):
        batches = self.script.database_batches(self.path)
        ids = self.ids
        self.assertEqual([(b.model, b.dtype, b.lengths, b.cells) for b in batches], [
            ("llama_1b", "bf16", [330, 12, 871], [(ids["padded"], "padded"), (ids["packed"], "packed")]),
            ("llama_1b", "bf16", [5, 9, 1], [(ids["seed2"], "packed")]),
            ("llama_1b", "fp32", [330, 12, 871], [(ids["fp32"], "padded")])])
        self.assertEqual(batches[0].cells_text(), f"{ids['padded']},{ids['packed']}")
        # 1213 real tokens of 3 × 871 rows: 53.6 % padding.
        self.assertEqual(batches[0].description(),
                         f"# llama_1b bf16: 3 sequences, 1213 real tokens, longest 871, padding 53.6%; "
                         f"sweetspot cells {ids['padded']} (padded), {ids['packed']} (packed)")

    def test_one_cell_whatever_its_status_and_why_not(self):
        (batch,) = self.script.database_batches(self.path, self.ids["failed"])
        self.assertEqual((batch.lengths, batch.cells), ([7, 7, 7], [(self.ids["failed"], "padded")]))
        with self.assertRaisesRegex(self.script.BadInput, "stored no drawn lengths: its lengths are 'fixed'"):
            self.script.database_batches(self.path, self.ids["fixed"])
        with self.assertRaisesRegex(self.script.BadInput, "has no cell 999"):
            self.script.database_batches(self.path, 999)

    def test_a_database_from_before_the_lengths_were_stored(self):
        db = FixtureDb(self.folder, "v26.db")
        db.con.execute("ALTER TABLE cells DROP COLUMN drawn_lengths")
        db.close()
        with self.assertRaisesRegex(self.script.BadInput, "schema 26 or older.*sweetspot merge -o NEW.db"):
            self.script.database_batches(db.path)

    def test_a_lengths_file_reads_as_a_file_lengths_axis_reads_it(self):
        parse = self.script.parse_lengths
        self.assertEqual(parse("# lengths\n12\n\n 7 # a comment\n3.0\n", "f.txt"), [12, 7, 3])
        for text, error in (("5\n0\n", "f.txt:2: expected a positive integer length, got '0'"),
                            ("5\n2.5\n", "f.txt:2: expected a positive integer length, got '2.5'"),
                            ("five\n", "f.txt:1: expected"), ("# none\n", "f.txt holds no length")):
            with self.assertRaisesRegex(self.script.BadInput, re.escape(error)):
                parse(text, "f.txt")
        self.assertEqual(self.script.lengths_list("330,12"), [330, 12])

    def test_help_and_bad_input_need_no_torch(self):
        code, out = self.run_script("--help")
        self.assertEqual(code, 0, out)
        self.assertIn("--lengths-from DB", out)
        self.assertIn("model dtype mode tokens rows median_ms p10_ms p90_ms peak_gib check_rel_err cells", out)
        code, out = self.run_script("--lengths-from", self.path, "--models", "llama_1b")
        self.assertEqual(code, 2)
        self.assertIn("with --lengths-from each batch runs on its cells' model and dtype", out)
        code, out = self.run_script("--lengths", "4,2", "--cell", "3")
        self.assertEqual(code, 2)
        self.assertIn("--cell names a cell of --lengths-from DB", out)
        code, out = self.run_script("--lengths-from", os.path.join(self.folder, "missing.db"))
        self.assertEqual(code, 2)
        self.assertIn("no such database", out)
        code, out = self.run_script("--lengths-from", self.path, "--cell", str(self.ids["fixed"]))
        self.assertEqual(code, 2)
        self.assertIn("stored no drawn lengths", out)


# --- analysis/report.py ---------------------------------------------------------------------------

class ReportRunTest(DbTest):
    """The report of a database of the baseline variant alone, on one GPU: device cells at batch 1
    and 2 (throughput has a line), each with two stored phases (cell_phases is drawn)."""

    @classmethod
    def build(cls, db):
        db.set_run(gpu_name="GPU A", h2d_gbps=25.0)
        for batch, median in [(1, 100.0), (2, 150.0)]:
            cell = gpu_cell(db, "device", batch=batch, latency_median_ms=median, latency_p10_ms=median - 10,
                            latency_p90_ms=median + 10, streamed_bytes=0)
            for position, (phase, seconds) in enumerate([("weights", 1.0), ("timed", 2.0)]):
                db.insert("cell_phases", dict(cell_id=cell, position=position, phase=phase, seconds=seconds))
        return {}

    def report(self, name):
        """report.py's stdout and its index.html, and the folder it wrote."""
        out = os.path.join(self.folder, name)
        done = subprocess.run([sys.executable, str(REPO / "analysis" / "report.py"), self.path, "-o", out],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(out, "index.html"), encoding="utf-8") as f:
            return done.stdout, f.read(), out

    def test_a_figure_that_answers_nothing_is_left_out_with_the_reason(self):
        """Performance ÷ baseline with only the baseline variant would be one bar at 1.0 per model."""
        stdout, html, out = self.report("baseline_only")
        self.assertFalse(os.path.exists(os.path.join(out, "normalized_performance.png")))
        self.assertFalse(os.path.exists(os.path.join(out, "normalized_performance.svg")))
        reason = "only the baseline variant was measured, so every bar would be 1"
        self.assertIn(f"report: normalized_performance: not drawn: {reason}", stdout)
        self.assertIn("Figures not drawn", html)
        self.assertIn(reason, html)
        self.assertTrue(os.path.exists(os.path.join(out, "throughput_vs_batch.png")))

    def test_each_figure_is_laid_out_once_and_the_cells_read_once(self):
        """The cost of a report is its figures' draws: a drawn figure is drawn once to find its box and
        once per file (PNG, SVG), not again for each file's box; and the figures share one reading of
        the cells rather than querying them each."""
        from matplotlib.figure import Figure

        draws = {}
        real_draw = Figure.draw

        def counted(figure, renderer):
            draws[id(figure)] = draws.get(id(figure), 0) + 1
            return real_draw(figure, renderer)

        data = report_data(self.path)
        statements = []
        data.db.con.set_trace_callback(statements.append)
        out = os.path.join(self.folder, "counted")
        os.makedirs(out)
        Figure.draw = counted
        try:
            results = report.Drawing(data, out, jobs=1).results()
        finally:
            Figure.draw = real_draw
        drawn = [r.name for r in results if r.caption]
        self.assertEqual(drawn, ["throughput_vs_batch", "cell_phases"])
        self.assertEqual(sorted(draws.values()), [3, 3])  # the box, the SVG, the PNG
        self.assertEqual(sorted(os.listdir(out)), ["cell_phases.png", "cell_phases.svg", "throughput_vs_batch.png",
                                                   "throughput_vs_batch.svg"])
        self.assertEqual([q for q in statements if " FROM cells " in q.replace("\n", " ")], [])

    def test_a_drawing_process_that_dies_fails_the_report(self):
        """Rather than waiting for ever for its figure (a process killed for memory, say)."""
        real_draw = report.draw
        report.draw = lambda name, data, out_dir: os._exit(9)  # the forked workers see it too
        try:
            with report.Drawing(report_data(self.path), self.folder, 2) as drawing:
                with self.assertRaisesRegex(report.DrawingFailed, "died before it finished"):
                    drawing.results()
        finally:
            report.draw = real_draw

    def test_figures_drawn_in_parallel_are_those_drawn_in_one_process(self):
        data = report_data(self.path)
        folders = [os.path.join(self.folder, f"jobs{jobs}") for jobs in (1, 2)]
        results = []
        for jobs, out in zip((1, 2), folders):
            os.makedirs(out)
            with report.Drawing(data, out, jobs) as drawing:
                results.append([(r.name, r.caption, r.reason) for r in drawing.results()])
        self.assertEqual(results[0], results[1])
        self.assertEqual([name for name, _, _ in results[0]],
                         [importlib.import_module(f"figures.{n}").NAME for n in report.FIGURES])
        self.assertEqual(sorted(os.listdir(folders[0])), sorted(os.listdir(folders[1])))


# --- analysis/time_split.py -----------------------------------------------------------------------

MS = 1_000_000  # ns


class TimeSplitTest(DbTest):
    """One traced iteration, host range [0.9, 10] ms. Compute stream 7: kernels [1, 3], [4, 5],
    [5.5, 6.5] ms; stream 9: one kernel [1.5, 1.8]. Host-to-device: explicit copies [1.2, 2.0] 20 MB
    (25 GB/s), [3.0, 4.2] 12 MB (10 GB/s), [3.5, 3.7] 0.5 MB (under 1 MiB), and a UM migration
    [5.6, 6.0] 2 MB (5 GB/s). Left out: a device-to-host migration, a copy begun before the range,
    and a kernel begun after it.
    A second cell starts with a copy: [1.0, 1.5] 10 MB (20 GB/s) before the kernels [1.5, 2.5] and
    [3.0, 3.5] on stream 7, and [2.6, 2.9] 5 MB (16.67 GB/s) between them; host range [0.9, 5] ms."""

    @classmethod
    def build(cls, db):
        db.set_run(h2d_gbps=25.0, gpu_name="Fixture GPU")
        c = gpu_cell(db, "explicit-copy", trace_iterations=1, streamed_bytes=6 * GB, latency_median_ms=6.0)
        db.add_range(c, round(0.9 * MS), 10 * MS, "traced iteration 0")
        for s, e in ((1.0, 3.0), (4.0, 5.0), (5.5, 6.5)):
            db.add_kernel(c, round(s * MS), round(e * MS), 7)
        db.add_kernel(c, round(1.5 * MS), round(1.8 * MS), 9)
        db.add_kernel(c, round(10.2 * MS), round(11 * MS), 7)
        db.add_copy(c, round(1.2 * MS), round(2.0 * MS), 1, 20_000_000, stream=8)
        db.add_copy(c, round(3.0 * MS), round(4.2 * MS), 1, 12_000_000, stream=8)
        db.add_copy(c, round(3.5 * MS), round(3.7 * MS), 1, 500_000, stream=9)
        db.add_copy(c, round(5.6 * MS), round(6.0 * MS), 11, 2_000_000, cause=3)
        db.add_copy(c, round(6.0 * MS), round(7.5 * MS), 12, 5_000_000, cause=4)
        db.add_copy(c, round(0.5 * MS), round(0.95 * MS), 1, 7_000_000, stream=8)
        db.add_range(c, round(2.9 * MS), round(4.3 * MS), "acquire")
        db.add_range(c, round(2.8 * MS), round(5.1 * MS), "layer 1")
        first = gpu_cell(db, "explicit-copy", trace_iterations=1, streamed_bytes=6 * GB, latency_median_ms=2.5,
                         budget="50%")
        db.add_range(first, round(0.9 * MS), 5 * MS, "traced iteration 0")
        db.add_kernel(first, round(1.5 * MS), round(2.5 * MS), 7)
        db.add_kernel(first, round(3.0 * MS), round(3.5 * MS), 7)
        db.add_copy(first, round(1.0 * MS), round(1.5 * MS), 1, 10_000_000, stream=8)
        db.add_copy(first, round(2.6 * MS), round(2.9 * MS), 1, 5_000_000, stream=8)
        return {"cell": c, "copy_first": first}

    def split(self, name):
        con = sqlite3.connect(self.path)
        try:
            return time_split.time_split(con, self.ids[name])
        finally:
            con.close()

    def check(self, split, expected):
        self.assertEqual(sorted(split), sorted(expected))
        for key, value in expected.items():
            self.assertAlmostEqual(split[key], value, places=9, msg=key)

    def test_split(self):
        self.check(self.split("cell"), {
            "traced_ms": 5.5,          # first compute 1.0 to last activity 6.5
            "compute_busy_ms": 4.0,    # 2 + 1 + 1 on stream 7 (the stream with the most kernels)
            "idle_waiting_ms": 1.0,    # compute idle [3, 4] while [3, 4.2] copies
            "idle_other_ms": 0.5,      # compute idle [5, 5.5] with the link idle
            "htod_gb": 0.0345,         # 20 + 12 + 0.5 + 2 MB
            "link_busy_ms": 2.4,       # [1.2, 2.0] + [3.0, 4.2] + [5.6, 6.0]
            "link_gbps": 34.5 / 2.4,   # 14.375 GB/s while busy
            "copy_gbps_median": 10.0,  # median of 25, 10, 5 (the 0.5 MB copy is too small to count)
            "link_idle_ms": 3.1,       # 5.5 - 2.4
            "head_ms": 0.2,            # 1.0 to the first copy at 1.2
            "tail_ms": 0.5,            # the last copy ends at 6.0, compute at 6.5
        })

    def test_split_when_a_copy_comes_first(self):
        """The iteration starts at the first copy, not the first kernel: the wait for it is idle time."""
        self.check(self.split("copy_first"), {
            "traced_ms": 2.5,             # the copy at 1.0 to the last kernel's end at 3.5
            "compute_busy_ms": 1.5,       # 1.0 + 0.5
            "idle_waiting_ms": 0.8,       # [1.0, 1.5] before the first kernel, [2.6, 2.9] between them
            "idle_other_ms": 0.2,         # the rest of [2.5, 3.0]
            "htod_gb": 0.015,             # 10 + 5 MB
            "link_busy_ms": 0.8,          # 0.5 + 0.3
            "link_gbps": 18.75,           # 15 MB / 0.8 ms
            "copy_gbps_median": (20 + 50 / 3) / 2,  # median of 20 and 16.67 GB/s
            "link_idle_ms": 1.7,          # 2.5 - 0.8
            "head_ms": 0.0,               # the link is busy from the start
            "tail_ms": 0.6,               # 2.9 to 3.5
        })

    def test_overlapping_copies_are_one_transfer(self):
        """transfers(): the 0.5 MB copy inside the 12 MB one joins its burst (12.5 MB over 1.2 ms),
        begun in the 1.4 ms acquire of layer 1."""
        con = sqlite3.connect(self.path)
        found = time_split.transfers(con, self.ids["cell"])
        con.close()
        self.assertEqual(len(found), 3)
        burst = found[1]
        self.assertAlmostEqual(burst["start_ms"], 2.1)  # 3.0 - 0.9
        self.assertAlmostEqual(burst["mb"], 12.5)
        self.assertAlmostEqual(burst["ms"], 1.2)
        self.assertAlmostEqual(burst["gbps"], 12.5 / 1.2)
        self.assertEqual(burst["host_phase"], "acquire (layer 1)")
        self.assertAlmostEqual(burst["host_phase_ms"], 1.4)
        self.assertAlmostEqual(found[2]["start_ms"], 4.7)  # the UM migration at 5.6
        self.assertAlmostEqual(found[2]["mb"], 2.0)


class TimelineTest(DbTest):
    """A uvm cell whose host ran ahead: `layer 0` [0.1, 0.2] ms and `layer 1` [0.2, 0.3] ms on the host
    (each with a `compute` from 0.12 / 0.22 ms), whose launches at 0.13 and 0.23 ms ran as the kernels
    [1, 4] and [4, 9] ms; traced iteration [0, 10] ms. Dense UM traffic: 40,000 host→device
    migrations of 100 ns from 1 ms on, every 200 ns, alternately fault-driven and speculative, and
    10,000 GPU fault groups. A second cell has the same ranges and kernels but no API calls, so
    nothing to project its ranges with."""

    MIGRATIONS = 40_000

    @classmethod
    def build(cls, db):
        ids = {}
        for name, with_calls in (("projected", True), ("host", False)):
            c = gpu_cell(db, "uvm", trace_iterations=1, budget="50%", prefetch="off", latency_median_ms=9.0)
            ids[name] = c
            db.add_range(c, 0, 10 * MS, "traced iteration 0")
            for layer, host in enumerate((0.1, 0.2)):
                db.add_range(c, round(host * MS), round((host + 0.1) * MS), f"layer {layer}")
                db.add_range(c, round((host + 0.02) * MS), round((host + 0.1) * MS), "compute")
            kernel = db.string_id("fixture_kernel")
            launch = db.string_id("cudaLaunchKernel_v7000")
            for correlation, (start, end, launched) in enumerate(((1.0, 4.0, 0.13), (4.0, 9.0, 0.23)), start=1):
                db.insert("CUPTI_ACTIVITY_KIND_KERNEL", dict(
                    cell_id=c, start=round(start * MS), end=round(end * MS), deviceId=0, contextId=1, streamId=7,
                    correlationId=correlation, gridX=1, gridY=1, gridZ=1, blockX=1, blockY=1, blockZ=1,
                    registersPerThread=0, staticSharedMemory=0, dynamicSharedMemory=0, shortName=kernel,
                    demangledName=kernel))
                if with_calls:
                    db.insert("CUPTI_ACTIVITY_KIND_RUNTIME", dict(
                        cell_id=c, start=round(launched * MS), end=round(launched * MS) + 500, globalTid=1,
                        correlationId=correlation, nameId=launch, returnValue=0))
            db.con.executemany(
                'INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (cell_id, start, "end", deviceId, contextId, streamId, '
                "correlationId, copyKind, srcKind, dstKind, bytes, migrationCause) VALUES (?, ?, ?, 0, 1, 0, 0, 11, 0, 0, "
                "65536, ?)",
                [(c, MS + 200 * i, MS + 200 * i + 100, 2 if i % 2 == 0 else 3) for i in range(cls.MIGRATIONS)])
            db.con.executemany(
                'INSERT INTO CUDA_UM_GPU_PAGE_FAULT_EVENTS (cell_id, start, "end", deviceId, address, '
                "numberOfPageFaults, faultAccessType) VALUES (?, ?, ?, 0, ?, 4, 1)",
                [(c, MS + 800 * i, MS + 800 * i + 50, 4096 * i) for i in range(10_000)])
        return ids

    def drawn(self, name):
        data = report_data(self.path)
        data.timeline_cell = self.ids[name]
        self.addCleanup(plt.close, "all")
        return timeline.render(data), data

    def test_nvtx_rows_are_the_ranges_projected_onto_the_gpu(self):
        data = report_data(self.path)
        ev = timeline.events(data.db, self.ids["projected"], 0, 10 * MS)
        self.assertTrue(ev["projected"])
        tracks, _ = timeline.layout(ev, 0, 10 * MS, {2: "Page fault", 3: "Speculative prefetch"})
        # Layer 0 launched the kernel [1, 4] ms, layer 1 the kernel [4, 9] ms; so did their computes.
        for row in ("NVTX layers (GPU)", "NVTX phases (GPU)"):
            self.assertEqual([(round(s, 6), round(w, 6)) for s, w, _ in tracks.rows[row]], [(1.0, 3.0), (4.0, 5.0)])

    def test_nvtx_rows_without_api_calls_are_host_time(self):
        data = report_data(self.path)
        ev = timeline.events(data.db, self.ids["host"], 0, 10 * MS)
        self.assertFalse(ev["projected"])
        tracks, _ = timeline.layout(ev, 0, 10 * MS, {})
        self.assertEqual([(round(s, 6), round(w, 6)) for s, w, _ in tracks.rows["NVTX layers (host)"]],
                         [(0.1, 0.1), (0.2, 0.1)])
        drawn, _ = self.drawn("host")
        self.assertIn("drawn in host time", drawn.caption)

    def test_title_names_the_cell(self):
        drawn, _ = self.drawn("projected")
        self.assertEqual(drawn.figure.axes[0].get_title(),
                         f"Cell {self.ids['projected']}: tiny fp32, batch 1 × seq 8, uvm, budget 50%, prefetch off, "
                         "streams 1")

    def test_speculative_prefetches_coloured_apart_from_faults_in_a_colour_blind_palette(self):
        okabe_ito_and_greys = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7",
                               "#000000", "#666666", "#999999", "#C8C8C8"}
        data = report_data(self.path)
        ev = timeline.events(data.db, self.ids["projected"], 0, 10 * MS)
        tracks, _ = timeline.layout(ev, 0, 10 * MS, {2: "Page fault", 3: "Speculative prefetch"})
        faults = tracks.rows["UM host→device: Page fault"]
        speculative = tracks.rows["UM host→device: Speculative prefetch"]
        self.assertEqual((len(faults), len(speculative)), (self.MIGRATIONS // 2, self.MIGRATIONS // 2))
        self.assertEqual({c for _, _, c in faults}, {"#D55E00"})       # vermillion
        self.assertEqual({c for _, _, c in speculative}, {"#56B4E9"})  # sky blue
        legend = {h.get_label(): h.get_facecolor() for h in timeline.legend_handles(ev, {2: "Page fault",
                                                                                          3: "Speculative prefetch"})}
        self.assertNotEqual(legend["UM: Page fault"], legend["UM: Speculative prefetch"])
        cell_row = data.cells.set_index("cell_id").loc[self.ids["projected"]]
        self.assertIn("speculative prefetches moved 50 % of the host→device bytes",  # 20,000 × 64 KiB of each
                      timeline.caption(self.ids["projected"], cell_row, ev, asked=True))
        drawn_colors = {c for bars in tracks.rows.values() for _, _, c in bars}
        phases = set(timeline.PHASE_COLORS.values())
        self.assertLessEqual(drawn_colors - phases, okabe_ito_and_greys)

    def test_bars_closer_than_the_narrowest_drawn_are_joined(self):
        # Out of order; [0, 1] and [1.05, 2.05] are 0.05 apart (under the gap of 0.1): one bar [0, 2.05];
        # [3.2, 3.3] lies inside [3, 3.5]; [5, 6] is 1.5 away from it.
        self.assertEqual(timeline.coalesce([(5, 1), (0, 1), (1.05, 1), (3, 0.5), (3.2, 0.1)], 0.1),
                         [(0, 2.05), (3, 0.5), (5, 1)])
        self.assertEqual(timeline.coalesce([(0, 1), (1.25, 1)], 0.125), [(0, 1), (1.25, 1)])
        self.assertEqual(timeline.coalesce([], 0.1), [])

    def test_dense_svg_stays_under_2_mb(self):
        from figures.common import apply_style

        apply_style()
        drawn, _ = self.drawn("projected")
        path = os.path.join(self.folder, "timeline.svg")
        drawn.figure.savefig(path, metadata={"Date": None})  # as report.py saves it
        self.assertLess(os.path.getsize(path), 2_000_000)


# --- small pure functions -------------------------------------------------------------------------

class ShownValuesTest(unittest.TestCase):
    """Numbers the page and the timeline print that no figure data above covers."""

    def test_run_values(self):
        self.assertEqual(html_page.run_value("gpu_memory_bytes", 80 * GIB), "80.0 GiB")
        self.assertEqual(html_page.run_value("h2d_gbps", 24.96), "25.0")
        self.assertEqual(html_page.run_value("d2h_gbps", float("nan")), "–")

    def test_timeline_bars_in_ms_from_the_window(self):
        tracks = timeline.Tracks(1 * MS, 11 * MS, ["stream 7"])  # a 10 ms window
        tracks.add("stream 7", 3 * MS, round(3.5 * MS), "c")
        tracks.add("stream 7", 4 * MS, 4 * MS + 1, "c")  # 1 ns: widened to 0.05 % of 10 ms
        (s1, w1, _), (s2, w2, _) = tracks.rows["stream 7"]
        self.assertAlmostEqual(s1, 2.0)
        self.assertAlmostEqual(w1, 0.5)
        self.assertAlmostEqual(s2, 3.0)
        self.assertAlmostEqual(w2, 0.005)

    def test_timeline_caption_um_megabytes(self):
        import pandas as pd

        ev = {
            "kernels": pd.DataFrame({"start": [0], "end": [1], "streamId": [7]}),
            "copies": pd.DataFrame({"start": [0, 2, 4], "end": [1, 3, 5], "streamId": [0, 0, 8],
                                    "copyKind": [11, 12, 1], "bytes": [1_500_000, 2_500_000, 9_000_000],
                                    "cause": [2, 4, 0]}),
            "gpu_faults": pd.DataFrame({"start": [], "end": [], "numberOfPageFaults": []}),
            "cpu_faults": pd.DataFrame({"start": []}),
            "ranges": pd.DataFrame({"start": [], "end": [], "text": []}),
        }
        cell_row = dict(model="tiny", backend="uvm", dtype="fp32", batch=1, seq=8, streams=1, prefetch="off",
                        budget="50%")
        text = timeline.caption(3, cell_row, ev, asked=True)
        self.assertIn("1 kernel and 1 copy on 2 streams, 2 UM migrations (4.0 MB)", text)  # 1.5 + 2.5 MB
        self.assertNotIn("traced iterations took", text)
        timed = timeline.caption(3, cell_row, ev, asked=True, timing=(713.0, 406.0))
        self.assertIn("the traced iterations took 713.0 ms (median) against 406.0 ms timed, 1.76 × the latency", timed)


class ReadingLeavesNoFilesTest(unittest.TestCase):
    """connect() reads a WAL database without leaving -wal or -shm files beside it, and still sees
    what a writer that is open has committed."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "r.db")
        con = sqlite3.connect(self.path)
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("CREATE TABLE t (x)")
        con.execute("INSERT INTO t VALUES (1)")
        con.commit()
        con.close()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def beside(self):
        return sorted(name for name in os.listdir(self.dir) if name != "r.db")

    def test_no_writer(self):
        before = pathlib.Path(self.path).read_bytes()
        self.assertEqual(self.beside(), [])
        con, tables = connect(self.path)
        self.assertEqual(con.execute("SELECT count(*) FROM t").fetchone()[0], 1)
        self.assertEqual(tables, {"t"})
        with self.assertRaises(sqlite3.OperationalError):  # it reads only
            con.execute("INSERT INTO t VALUES (2)")
        con.close()
        self.assertEqual(self.beside(), [])
        self.assertEqual(pathlib.Path(self.path).read_bytes(), before)

    def test_a_writer_open(self):
        writer = sqlite3.connect(self.path)
        writer.execute("INSERT INTO t VALUES (2)")
        writer.commit()
        for checkpointed in (False, True):  # its -wal file holding transactions, then emptied
            if checkpointed:
                writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con, _ = connect(self.path)
            self.assertEqual(con.execute("SELECT count(*) FROM t").fetchone()[0], 2)
            con.close()
            self.assertEqual(self.beside(), ["r.db-shm", "r.db-wal"])  # the writer's, still in use
        writer.execute("INSERT INTO t VALUES (3)")
        writer.commit()
        writer.close()
        self.assertEqual(self.beside(), [])


if __name__ == "__main__":
    unittest.main()
