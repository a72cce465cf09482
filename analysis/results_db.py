"""Reading a sweetspot results database (schema: results/README.md) for the report.

The file is only read (connect()). Figures ask which tables and columns exist, because files written
by older versions lack some (version 1 had no event tables at first, version 4 no predicted
allocations, version 5 no NVML readings). The cells' parameters and their roles come from the
file's own `axes` table (analysis/axes.py), or for files older than it from OLDER_AXES.
"""
import pandas as pd

from axes import Axes
from bound import cell_bounds, driver_ceilings, is_measured, managed_rates, present
from read_only import BadDatabase, BadInput, connect  # noqa: F401 (BadInput: the report's callers catch it from here)

# Versions this report reads without an `axes` table: it names every column it needs and skips a
# figure whose columns a file lacks, so an older file cannot be misread. Files that describe their
# own columns (schema 11 on) are read by that description.
OLDER_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)

# What the report takes from a cell's run (absent from the oldest files: filled with NULL).
RUN_COLUMNS = ("h2d_gbps", "d2h_gbps", "host_memory_gbps", "host_update_gbps", "gpu_name", "gpu_driver",
               "gpu_memory_bytes", "cpu_model", "host")


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
        bounds = cell_bounds(records, managed_rates(self.con), self.axes.workload)
        for column in ("bound_ms", "x_bound", "driver_bound_ms", "driver_bound_from", "x_driver_bound", "faster_than"):
            cells[column] = [b[column] for b in bounds]
        for column in ("bound_ms", "x_bound", "driver_bound_ms", "x_driver_bound"):
            cells[column] = cells[column].astype(float)
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
