"""Reading a sweetspot results database (schema: results/README.md) for the report.

The file is only read (connect()). Figures ask which tables and columns exist, because files written
by older versions lack some (version 1 had no event tables at first, version 4 no predicted
allocations, version 5 no NVML readings). The cells' parameters and their roles come from the
file's own `axes` table (analysis/axes.py), or for files older than it from OLDER_AXES.
"""
import os
import pathlib
import sqlite3

import pandas as pd

from axes import Axes
from bound import bound_ms, device_latencies, driver_bound, driver_ceilings, faster_than, managed_rates, present

# Versions this report reads without an `axes` table: it names every column it needs and skips a
# figure whose columns a file lacks, so an older file cannot be misread. Files that describe their
# own columns (schema 11 on) are read by that description.
OLDER_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

# What the report takes from a cell's run (absent from the oldest files: filled with NULL).
RUN_COLUMNS = ("h2d_gbps", "d2h_gbps", "gpu_name", "gpu_driver", "cpu_model", "host")


def is_measured(cell):
    """A cell with bounds: an ok GPU cell (as in scripts/bench/backends_table.py; a host cell has no link)."""
    return cell["status"] == "ok" and cell["backend"] != "host"


class BadInput(Exception):
    """What the user asked for cannot be done with this input; the message says why."""


class BadDatabase(BadInput):
    """The file is missing, unreadable, or not a sweetspot results database this report reads."""


def has_wal_frames(path):
    wal = pathlib.Path(f"{path}-wal")
    return wal.is_file() and wal.stat().st_size > 0


def connect(path):
    """A connection that reads only, and the names of the tables and views.

    SQLite creates a WAL database's -wal and -shm files for any reader, and only a connection that
    can write removes them when it is the last to close: where this user may write the file and its
    folder, it is opened for writing with every write refused (query_only), so that reading leaves
    nothing beside it, unless its -wal file holds transactions (a sweep writing, or one killed before
    it folded them in, which only a writer should do). A WAL database in a folder this user cannot
    write (a results folder copied read-only) cannot be opened even read-only, since SQLite wants to
    create its -shm file; nobody can be writing to it there either, so it is then read as
    immutable, unless its -wal file holds transactions that reading it so would leave out."""
    uri = pathlib.Path(path).resolve().as_uri()
    folder = os.path.dirname(os.path.abspath(path))
    writable = os.access(path, os.W_OK) and os.access(folder, os.W_OK) and not has_wal_frames(path)
    first_error = None
    for options in (("mode=rw",) if writable else ()) + ("mode=ro", "mode=ro&immutable=1"):
        if options.endswith("immutable=1") and has_wal_frames(path):
            raise BadDatabase(f"{path} cannot be read where it is: it is a WAL database in a folder this user cannot "
                              f"write, and {path}-wal holds transactions not yet in it. Copy both files to a folder "
                              f"you can write and read the copy, or have the folder's owner fold them in: "
                              f"sqlite3 {path} 'PRAGMA wal_checkpoint(TRUNCATE)'")
        con = None
        try:
            con = sqlite3.connect(f"{uri}?{options}", uri=True)
            con.execute("PRAGMA query_only = ON")
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            return con, tables
        except sqlite3.Error as e:
            first_error = first_error or e
            if con is not None:
                con.close()
    raise BadDatabase(f"{path}: cannot read it as an SQLite database ({first_error})")


class ResultsDb:
    def __init__(self, path):
        self.path = str(path)
        self.con, self.tables = connect(self.path)
        if "schema_info" not in self.tables:
            raise BadDatabase(f"{self.path} is not a sweetspot results database (no schema_info table)")
        row = self.con.execute("SELECT version FROM schema_info").fetchone()
        if row is None:
            raise BadDatabase(f"{self.path}: schema_info is empty")
        self.schema_version = row[0]
        if self.schema_version not in OLDER_SCHEMA_VERSIONS and "axes" not in self.tables:
            raise BadDatabase(f"{self.path} has schema version {self.schema_version} and no `axes` table describing its "
                              "columns; this report reads versions " + ", ".join(map(str, OLDER_SCHEMA_VERSIONS))
                              + " and the files that describe themselves")
        self.axes = Axes.of(self.con)
        self._columns = {}

    def reopen(self):
        """A connection of its own, for a process forked from the one that opened the database."""
        self.con, self.tables = connect(self.path)

    def columns(self, table):
        if table not in self._columns:
            self._columns[table] = [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')]
        return self._columns[table]

    def has(self, *tables):
        return all(t in self.tables for t in tables)

    def query(self, sql, params=()):
        return pd.read_sql_query(sql, self.con, params=params)

    def runs(self):
        return self.query("SELECT * FROM runs ORDER BY run_id")

    def cells(self):
        """Every cell with its run's link bandwidth and machine, and its bound (ms) and latency ÷ bound."""
        present = [c for c in RUN_COLUMNS if c in self.columns("runs")]
        run_cols = "".join(f", r.{c}" for c in present)
        cells = self.query(f"SELECT c.*{run_cols} FROM cells c JOIN runs r USING (run_id) ORDER BY c.cell_id")
        for c in RUN_COLUMNS:
            if c not in cells:
                cells[c] = None
        for c in ("streamed_bytes", "streamed_gbps", "device_weight_bytes", "resident_bytes"):
            if c not in cells:
                cells[c] = None
        for c, value in self.axes.older_values.items():
            if c not in cells:
                cells[c] = value
        records = cells.to_dict("records")
        measured = [is_measured(r) for r in records]
        workload = self.axes.workload
        device_ms = device_latencies([r for r, m in zip(records, measured) if m], workload)
        cells["bound_ms"] = [bound_ms(r, device_ms, workload) if m else None for r, m in zip(records, measured)]
        cells["bound_ms"] = cells["bound_ms"].astype(float)
        cells["x_bound"] = cells["latency_median_ms"] / cells["bound_ms"]
        ceilings = self.driver_ceilings(records)
        driver = [driver_bound(r, device_ms, ceilings, workload) if m else None for r, m in zip(records, measured)]
        cells["driver_bound_ms"] = [d[0] if d else None for d in driver]
        cells["driver_bound_ms"] = cells["driver_bound_ms"].astype(float)
        cells["driver_bound_from"] = [d[1] if d else None for d in driver]
        cells["x_driver_bound"] = cells["latency_median_ms"] / cells["driver_bound_ms"]
        cells["faster_than"] = [faster_than(r) for r in cells.to_dict("records")]
        return cells

    def driver_ceilings(self, records):
        """{run_id: {operation: bound.Ceiling}}: the runs' probes, raised by the measured cells among
        `records` (cells as mappings) that moved their bytes faster."""
        return driver_ceilings([r for r in records if is_measured(r) and present(r["latency_median_ms"])],
                               managed_rates(self.con))

    def traced_iterations(self):
        """Number of traced iterations stored per cell_id."""
        df = self.query("SELECT cell_id, count(*) AS n FROM iterations WHERE phase = 'traced' GROUP BY cell_id")
        return dict(zip(df["cell_id"], df["n"]))
