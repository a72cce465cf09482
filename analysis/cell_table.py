"""The per-cell table of the HTML report: which columns, with what headings and number formats.

Its columns are the cell, every parameter a matrix sets (the database's axes, analysis/axes.py) that
tells two of its cells apart, in axes order, then the measures; the parameters every cell shares
are said once above it (same_in_every_cell), so a new axis shows up by itself."""
import math

import pandas as pd

from bound import present

# The measures the table shows after the cell's parameters: (column, heading, format), where format
# is a format spec for numbers, or None for text. Columns a database lacks, or where no cell has a
# value, are left out.
MEASURES = [
    ("status", "status", None),
    ("oversubscription", "weights ÷ budget", ".2f"),
    ("latency_median_ms", "median ms", ".4g"),
    ("latency_p10_ms", "p10 ms", ".4g"),
    ("latency_p90_ms", "p90 ms", ".4g"),
    ("spread_pct", "spread %", ".2f"),
    ("noise_pct", "noise %", ".2f"),
    ("tokens_per_s", "tokens/s", ",.0f"),
    ("forward_ms", "forward ms", ".4g"),
    ("backward_ms", "backward ms", ".4g"),
    ("optimizer_ms", "optimizer ms", ".4g"),
    ("loss", "loss first → last", ".4g"),
    ("grad_norm", "grad norm first → last", ".3g"),
    ("achieved_tflops", "TFLOP/s", ".3g"),
    ("mfu_pct", "MFU %", ".1f"),
    ("bound_ms", "bound ms", ".4g"),
    ("x_bound", "× bound", ".2f"),
    ("driver_bound_ms", "driver bound ms", ".4g"),
    ("x_driver_bound", "× driver bound", ".2f"),
    ("driver_bound_from", "driver bound from", None),
    ("faster_than", "faster than", None),
    ("streamed_gbps", "link GB/s", ".1f"),
    ("um_htod_bytes", "UM H→D MB", ",.1f"),
    ("um_dtoh_bytes", "UM D→H MB", ",.1f"),
    ("gpu_page_faults", "GPU faults", ",d"),
    ("cpu_page_faults", "CPU faults", ",d"),
    ("device_used_bytes", "device used MiB", ",.0f"),
    ("launches_per_forward", "launches / forward", ",d"),
    ("activation_bytes", "activations MiB", ",.1f"),
    ("check_rel_err", "rel. error", ".1e"),
    ("warnings", "warnings", None),
    ("reason", "reason", None),
]
# A training step's measures (mode = "train", results/README.md): shown for training cells only (an
# inference cell's forward is its latency), and only where the database has a training cell.
TRAINING = ("forward_ms", "backward_ms", "optimizer_ms", "loss", "grad_norm")
# Shown as "first → last" (the checked first step's, the last step's), sorted by the last.
FIRST_LAST = {"loss": ("loss_first", "loss_last"), "grad_norm": ("grad_norm_first", "grad_norm_last")}
# Shown in another unit than stored.
SCALE = {"um_htod_bytes": 1e6, "um_dtoh_bytes": 1e6, "device_used_bytes": 2**20, "activation_bytes": 2**20}


class Cell:
    """One table cell: its text, and the raw number it sorts by (None for text or NULL)."""

    def __init__(self, text, number=None):
        self.text = text
        self.number = number


def formatted(value, spec, column):
    value = present(value)
    if value is None:
        return Cell("–")
    if spec is None:
        return Cell(str(value))
    number = value / SCALE.get(column, 1)
    if spec.endswith("d"):
        number = int(round(number))
    return Cell(format(number, spec), number if math.isfinite(number) else None)


def first_last(record, column, spec):
    first, last = (present(record.get(c)) for c in FIRST_LAST[column])
    if first is None and last is None:
        return Cell("–")
    text = " → ".join("–" if v is None else format(v, spec) for v in (first, last))
    return Cell(text, last if last is not None and math.isfinite(last) else None)


def measure_cell(record, column, spec):
    """The table cell of one measure of a cell (a record of the cells DataFrame)."""
    if column == "status":
        return flagged(record)
    if column in TRAINING and record.get("mode") != "train":
        return Cell("–")
    if column in FIRST_LAST:
        return first_last(record, column, spec)
    return formatted(record[column], spec, column)


def shown(cells, column):
    """Whether the table has a column for the measure: some cell (a training cell, for a training
    measure) has a value."""
    if column in TRAINING:
        cells = cells[cells["mode"] == "train"] if "mode" in cells else cells.iloc[0:0]
    sources = FIRST_LAST.get(column, (column,))
    return any(c in cells and cells[c].notna().any() for c in sources)


def settable(axes):
    """The columns of the parameters a matrix sets (analysis/axes.py), run limits included."""
    return [c for c, _, in_matrix, _ in axes.rows if in_matrix]


def differs(values):
    return values.astype(str).nunique() > 1


def axis_format(values):
    """Whole numbers as integers, other numbers in general format, anything else as text."""
    if not pd.api.types.is_numeric_dtype(values):
        return None
    numbers = values.dropna()
    return "d" if (numbers % 1 == 0).all() else "g"


def cell_table(cells, axes):
    """(headings with their kinds, rows of Cell) for the cells DataFrame of a database whose
    parameters are `axes`: the cell, the parameters that differ among `cells`, the measures."""
    parameters = [(c, c, axis_format(cells[c])) for c in settable(axes) if c in cells and differs(cells[c])]
    measures = [(c, h, f) for c, h, f in MEASURES if shown(cells, c)]
    headings = [(h, "text" if f is None else "num") for _, h, f in [("cell_id", "cell", "d")] + parameters + measures]
    rows = [[formatted(r[c], f, c) for c, _, f in [("cell_id", "cell", "d")] + parameters]
            + [measure_cell(r, c, f) for c, _, f in measures] for r in cells.to_dict("records")]
    return headings, rows


def same_in_every_cell(cells, axes):
    """[(parameter, its value as the table would show it)] of the parameters every cell shares."""
    return [(c, formatted(cells[c].iloc[0], axis_format(cells[c]), c).text)
            for c in settable(axes) if c in cells and not differs(cells[c])]


def flagged(record):
    """The status, with "noisy" where the cell stopped on a limit above its noise criterion (still ok)."""
    noisy = present(record.get("noisy"))
    return Cell(f"{record['status']} (noisy)" if noisy else str(record["status"]))
