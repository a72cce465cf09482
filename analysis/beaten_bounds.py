"""The cells of a results database that ran faster than a bound they are divided by (bound.py):
`python3 analysis/beaten_bounds.py DB OUT` writes one line per such cell to OUT,
"cell_id<TAB>the bounds it beats<TAB>latency ÷ bound<TAB>latency ÷ driver bound" ("-" where a cell
has no such bound), for `sweetspot summary`, which flags them. Exit codes: 0 written (perhaps empty),
2 the database cannot be read. Standard library only, so that `summary` needs no more than python3."""
import sys

from axes import Axes
from bound import cell_bounds, managed_rates
from read_only import BadInput, connect

# Columns that older files lack, at the value their cells had.
ADDED_COLUMNS = {"streamed_bytes": None, "device_weight_bytes": None, "resident_bytes": None, "h2d_gbps": None,
                 "d2h_gbps": None, "link_to_host_bytes": None, "link_to_device_bytes": None, "host_memory_gbps": None,
                 "host_update_gbps": None, "host_state_gbps": None,
                 "host_shared_gbps": None, "host_arrays_gbps": None}


def beaten(con):
    """(cell_id, faster_than, x_bound, x_driver_bound) of every cell faster than one of its bounds."""
    con.row_factory = lambda cursor, row: {d[0]: v for d, v in zip(cursor.description, row)}
    runs = {r["name"] for r in con.execute("PRAGMA table_info(runs)")}
    link = "".join(f", r.{c}" for c in ("h2d_gbps", "d2h_gbps", "host_memory_gbps", "host_update_gbps") if c in runs)
    axes = Axes.of(con)
    records = [axes.fill_missing({**ADDED_COLUMNS, **c})
               for c in con.execute(f"SELECT c.*{link} FROM cells c JOIN runs r USING (run_id) ORDER BY c.cell_id")]
    bounds = cell_bounds(records, managed_rates(con), axes.workload)
    return [(r["cell_id"], b["faster_than"], b["x_bound"], b["x_driver_bound"])
            for r, b in zip(records, bounds) if b["faster_than"]]


def ratio_text(ratio):
    return "-" if ratio is None else f"{ratio:.3f}"


def main(argv):
    if len(argv) != 2:
        print("usage: beaten_bounds.py DB OUT", file=sys.stderr)
        return 2
    try:
        con, _ = connect(argv[0])
        rows = beaten(con)
    except (BadInput, OSError) as e:
        print(f"beaten_bounds.py: {e}", file=sys.stderr)
        return 2
    with open(argv[1], "w", encoding="utf-8") as out:
        for cell_id, names, x_bound, x_driver in rows:
            out.write(f"{cell_id}\t{names}\t{ratio_text(x_bound)}\t{ratio_text(x_driver)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
