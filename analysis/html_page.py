"""index.html of the report: self-contained (inline CSS and script, images as files beside it), with
the run metadata, one section per figure, the figures not drawn and why, and the per-cell table."""
import re
from html import escape

from bound import present
from cell_table import Cell, cell_table, same_in_every_cell
from time_split import COLUMNS as SPLIT_COLUMNS
from time_split import fmt

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; padding: 0 1em; color: #222; }
h1 { margin-bottom: 0.2em; }
h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
figure { margin: 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { margin-top: 0.5em; line-height: 1.4; }
.files { font-size: 0.9em; color: #555; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; position: sticky; top: 0; }
table.runs th { position: static; }
table.sortable th { cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
.wide { overflow-x: auto; }
tr.status-failed td, tr.status-timeout td, tr.status-invalid td { background: #fde8e8; }
tr.status-skipped td { color: #777; }
td.reason { min-width: 20em; max-width: 40em; }
/* The cell table has a column per parameter that differs: it scrolls in its own box, its headings
   stay in view and wrap between words (and after a parameter's underscores), and its numbers stay on
   one line. */
.wide.cells { max-height: 85vh; overflow: auto; border: 1px solid #ddd; }
table.cells { font-size: 0.78em; }
table.cells th { vertical-align: bottom; }
table.cells td { white-space: nowrap; }
table.cells td.reason { white-space: normal; }
p.same { font-size: 0.9em; }
pre { background: #f7f7f7; padding: 0.5em; overflow-x: auto; }
"""

# Sorts a table by the clicked column: numbers by their raw value (data-v), text by its text;
# empty values last either way.
SORT_SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  var headings = Array.from(table.tHead.rows[0].cells);
  headings.forEach(function (th, col) {
    th.addEventListener("click", function () {
      var ascending = th.getAttribute("aria-sort") !== "ascending";
      headings.forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      var numeric = th.dataset.type === "num";
      var key = function (row) {
        var cell = row.cells[col];
        if (numeric) { return cell.dataset.v === undefined ? null : parseFloat(cell.dataset.v); }
        return cell.textContent === "\\u2013" ? null : cell.textContent;
      };
      var body = table.tBodies[0];
      var rows = Array.from(body.rows);
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (x === null || y === null) { return (x === null) - (y === null); }
        var order = numeric ? x - y : x.localeCompare(y, undefined, {numeric: true});
        return ascending ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""

RUN_FIELDS = [
    ("run_id", "run"), ("started_at", "started"), ("finished_at", "finished"), ("status", "status"),
    ("host", "host"), ("os", "OS"), ("cpu_model", "CPU"), ("cpu_count", "CPUs"), ("gpu_name", "GPU"),
    ("gpu_memory_bytes", "GPU memory"), ("gpu_driver", "driver (CUDA)"), ("cuda_runtime", "CUDA runtime"),
    ("h2d_gbps", "pinned H2D GB/s"), ("d2h_gbps", "pinned D2H GB/s"), ("sweetspot_version", "sweetspot"),
    ("git_revision", "git revision"), ("matrix_name", "matrix"), ("matrix_path", "matrix file"),
    ("cells_total", "cells in matrix"), ("command_line", "command"),
]


def run_value(column, value):
    value = present(value)
    if value is None:
        return "–"
    if column == "gpu_memory_bytes":
        return f"{value / 2**30:.1f} GiB"
    if column in ("h2d_gbps", "d2h_gbps"):
        return f"{value:.1f}"
    return str(value)


def runs_section(runs):
    """One column per run, one row per field: runs are few and their fields many."""
    fields = [(c, h) for c, h in RUN_FIELDS if c in runs]
    records = runs.to_dict("records")
    out = ['<section id="runs"><h2>Runs</h2><div class="wide"><table class="runs"><tbody>']
    for column, heading in fields:
        out.append(f"<tr><th>{escape(heading)}</th>"
                   + "".join(f"<td>{escape(run_value(column, run[column]))}</td>" for run in records) + "</tr>")
    out.append("</tbody></table></div>")
    for run in records:
        if present(run.get("matrix_text")):
            out.append(f"<details><summary>Matrix of run {run['run_id']} ({escape(str(run.get('matrix_name')))})"
                       f"</summary><pre>{escape(run['matrix_text'])}</pre></details>")
    out.append("</section>")
    return "\n".join(out)


def with_code(text):
    """Escaped text, with `quoted` commands set as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def figure_section(result):
    name = escape(result.name)
    return (f'<section id="fig-{name}"><h2>{escape(result.title)}</h2><figure>'
            f'<img src="{name}.png" alt="{escape(result.title)}">'
            f"<figcaption>{with_code(result.caption)}</figcaption></figure>"
            f'<p class="files">Files: <a href="{name}.png">{name}.png</a> · <a href="{name}.svg">{name}.svg</a></p>'
            "</section>")


def skipped_section(skipped):
    if not skipped:
        return ""
    items = "".join(f"<li><strong>{escape(r.title)}</strong>: {with_code(r.reason)}</li>" for r in skipped)
    return f'<section id="not-drawn"><h2>Figures not drawn</h2><ul>{items}</ul></section>'


def sortable_table(headings, rows, row_class=None, css=""):
    """A table the page's script sorts: headings are (text, "num" | "text"), rows lists of cell_table.Cell;
    css: a class of its own for the table and the box around it."""
    out = [f'<div class="wide {css}"><table class="sortable {css}"><thead><tr>']
    out += [f'<th data-type="{kind}">{escape(h).replace("_", "_<wbr>")}</th>' for h, kind in headings]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append(f'<tr class="{escape(row_class(row))}">' if row_class else "<tr>")
        for (heading, kind), cell in zip(headings, row):
            value = f' data-v="{float(cell.number)!r}"' if cell.number is not None else ""
            css = "num" if kind == "num" else "reason" if heading == "reason" else ""
            out.append(f'<td class="{css}"{value}>{escape(cell.text)}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def time_split_section(splits):
    """One row per traced cell: (cell record, analysis/time_split.py's split of its traced iteration)."""
    if not splits:
        return ""
    headings = [("cell", "num"), ("backend", "text"), ("model", "text"), ("dtype", "text"), ("budget", "text"),
                ("prefetch", "text"), ("streams", "num"), ("timed ms", "num")] + [(h, "num") for h, _, _ in SPLIT_COLUMNS]
    rows = []
    for cell, split in splits:
        row = [Cell(str(cell["cell_id"]), cell["cell_id"])]
        row += [Cell(str(cell[k])) for k in ("backend", "model", "dtype", "budget", "prefetch")]
        row += [Cell(str(cell["streams"]), cell["streams"]), Cell(fmt(cell["latency_median_ms"]), cell["latency_median_ms"])]
        row += [Cell(fmt(split[key], digits), split[key]) for _, key, digits in SPLIT_COLUMNS]
        rows.append(row)
    return ('<section id="time-split"><h2>Where the time goes</h2><p>The first traced iteration of each traced cell, '
            "from its kernel and copy records: how long the compute stream was busy, how long it waited while weights "
            "were in flight (idle, link busy) or with nothing in flight, what crossed the host link and how fast, and "
            "the link's idle time before the first and after the last transfer (head, tail). A link-bound forward "
            "takes its transfers plus the tail.</p>" + sortable_table(headings, rows) + "</section>")


def driver_ceilings_section(db, cells):
    """The rates the driver bounds divide by: per run and managed-memory operation, the probe's rate,
    the fastest cell through it, and the ceiling the bounds use (analysis/bound.py)."""
    ceilings = db.driver_ceilings(cells.to_dict("records"))
    rows = []
    for run, operations in sorted(ceilings.items()):
        for op, c in operations.items():
            best = [Cell("–"), Cell("–")] if c.best_cell is None else [
                Cell(str(c.best_cell), c.best_cell), Cell(fmt(c.best_gbps, 1), c.best_gbps)]
            rows.append([Cell(str(run), run), Cell(op), Cell(fmt(c.probe_gbps, 1), c.probe_gbps), *best,
                         Cell(fmt(c.gbps, 1), c.gbps), Cell(c.source)])
    if not rows:
        return ""
    headings = [("run", "num"), ("operation", "text"), ("probe GB/s", "num"), ("fastest cell", "num"),
                ("its GB/s", "num"), ("ceiling GB/s", "num"), ("from", "text")]
    return ('<section id="driver-ceilings"><h2>Driver ceilings</h2><p>The rates the driver bounds of the uvm and '
            "uvm-prefetch cells divide their bytes by: each run's managed-memory probe (one operation on a 512 MiB "
            "range, median of five calls), and the fastest cell of the run through the operation (the bytes it "
            "moved that way in one forward ÷ its median latency). The ceiling is the higher of the two: the probe "
            "alone is no ceiling of what the driver does in a forward. The cells table's driver bound from column "
            "says what set each bound.</p>" + sortable_table(headings, rows) + "</section>")


def cells_section(cells, axes):
    if cells.empty:
        return '<section id="cells"><h2>Cells</h2><p>The database has no cells.</p></section>'
    headings, rows = cell_table(cells, axes)
    status_col = [h for h, _ in headings].index("status")
    same = ", ".join(f"{column} = {text}" for column, text in same_in_every_cell(cells, axes))
    return ('<section id="cells"><h2>Cells</h2><p>Every cell of the database; click a column heading to sort. '
            "The columns after the cell are the parameters that differ between cells, then what was measured. "
            "Latencies are of the timed iterations; × bound is the median latency ÷ the cell's bound; "
            "faster than names the bounds a cell beats (a bound is a floor: look into those cells)."
            + (" A training cell's latency is its step's; forward, backward and optimizer ms are the medians of its "
               "phases, and loss and grad norm those of its checked first step → its last step (sorted by the last)."
               if "mode" in cells and (cells["mode"] == "train").any() else "") + "</p>"
            + (f'<p class="same">Same in every cell: {escape(same)}.</p>' if same else "")
            + sortable_table(headings, rows, lambda row: f"status-{row[status_col].text}", css="cells")
            + "</section>")


def page(db, runs, cells, drawn, skipped, splits, generated_at):
    counts = cells["status"].value_counts()
    status = ", ".join(f"{n} {s}" for s, n in counts.items())
    toc = "".join(f'<li><a href="#fig-{escape(r.name)}">{escape(r.title)}</a></li>' for r in drawn)
    if skipped:
        toc += '<li><a href="#not-drawn">Figures not drawn</a></li>'
    if splits:
        toc += '<li><a href="#time-split">Where the time goes</a></li>'
    ceilings = driver_ceilings_section(db, cells)
    if ceilings:
        toc = '<li><a href="#driver-ceilings">Driver ceilings</a></li>' + toc
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>sweetspot report: {escape(db.path)}</title>
<style>{STYLE}</style>
</head>
<body>
<header>
<h1>sweetspot report</h1>
<p>Database <code>{escape(db.path)}</code> (schema version {db.schema_version}): {len(runs)} run(s), {len(cells)} cells
({escape(status)}). Generated {escape(generated_at)} by <code>sweetspot report</code>.</p>
<nav><ul><li><a href="#runs">Runs</a></li>{toc}<li><a href="#cells">Cells</a></li></ul></nav>
</header>
{runs_section(runs)}
{ceilings}
{"".join(figure_section(r) for r in drawn)}
{skipped_section(skipped)}
{time_split_section(splits)}
{cells_section(cells, db.axes)}
<script>{SORT_SCRIPT}</script>
</body>
</html>
"""
