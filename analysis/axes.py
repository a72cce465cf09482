"""The parameters of a results database's cells and what each one decides (results/README.md, `axes`).

A file written since schema 11 describes its own columns in its `axes` table: each parameter's
column, its role (`workload`: what is computed; `placement`: how it runs on the machine, where the
weights live and how they and the kernels reach the GPU; `protocol`: how it is measured; `limit`:
when its run is cut short), whether a matrix sets it (the model's shape comes with the model), and
its default. Older files lack that table: OLDER_AXES describes them. Standard library only, so the
bench scripts can use it without pandas.
"""

# The parameters of files up to schema 10, in table order: (column, role, set in a matrix, the value
# every cell of a file from before the column had, or None where the column was always there).
OLDER_AXES = (
    ("model", "workload", True, None),
    ("n_layer", "workload", False, None),
    ("n_embd", "workload", False, None),
    ("n_head", "workload", False, None),
    ("vocab_size", "workload", False, None),
    ("max_positions", "workload", False, None),
    ("variant", "workload", True, None),
    ("backend", "placement", True, None),
    ("dtype", "workload", True, None),
    ("batch", "workload", True, None),
    ("seq", "workload", True, None),
    ("streams", "placement", True, None),
    ("prefetch", "placement", True, None),
    ("budget", "placement", True, None),
    ("activations", "placement", True, None),
    ("resident", "placement", True, None),
    ("evict", "placement", True, None),
    ("tf32", "workload", True, None),
    ("launch", "placement", True, "kernels"),
    ("dropout", "workload", True, 0.0),
    ("mode", "workload", True, None),
    ("weights", "workload", True, None),
    ("warmups", "protocol", True, None),
    ("iterations", "protocol", True, None),
    ("trace_iterations", "protocol", True, None),
    ("max_noise_pct", "protocol", True, 0.0),
    ("max_iterations", "protocol", True, 0),
    ("max_time_s", "protocol", True, 0.0),
    ("seed", "protocol", True, None),
    ("repeat", "protocol", True, 1),
    ("timeout_s", "limit", True, None),
    ("debug_fault", "limit", True, None),
)


class Axes:
    """The cell parameters of one database, by role."""

    def __init__(self, rows):
        self.rows = tuple(rows)
        # In the order labels name them: every parameter a matrix sets but the run limits.
        self.parameters = tuple(c for c, role, in_matrix, _ in self.rows if in_matrix and role != "limit")
        self.model_shape = tuple(c for c, _, in_matrix, _ in self.rows if not in_matrix)
        self.protocol = tuple(c for c, role, _, _ in self.rows if role == "protocol")
        # What a `device` cell must share with a cell to be its in-memory reference (analysis/bound.py).
        self.workload = tuple(c for c, role, _, _ in self.rows if role == "workload")
        # What tells apart two measurements of different things: what is computed and how it runs.
        self.identity = tuple(c for c, role, _, _ in self.rows if role in ("workload", "placement"))
        self.older_values = {c: before for c, _, _, before in self.rows if before is not None}

    @classmethod
    def of(cls, con):
        """The axes of the database open on the sqlite3 connection `con`: its own description, or
        OLDER_AXES for a file from before schema 11."""
        has = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'axes'").fetchone()
        if not has:
            return cls(OLDER_AXES)
        # Such a file has a column for every parameter it describes: none is missing.
        rows = con.execute("SELECT column_name, role, in_matrix FROM axes ORDER BY rowid")
        return cls((column, role, bool(in_matrix), None) for column, role, in_matrix in rows)

    def fill_missing(self, cell):
        """The cell (a dict) with the parameters its file lacks at the values its cells had."""
        return {**self.older_values, **cell}
