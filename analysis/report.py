#!/usr/bin/env python3
"""The sweetspot report: figures (PNG and SVG) and a self-contained index.html from a results database.

Usage: report.py DB -o DIR [--timeline-cell ID]
`sweetspot report` runs this; it can also be run directly. Exit codes: 0 written, 1 a process
drawing the figures died (nothing written), 2 bad input
(missing or unreadable database, not a sweetspot database, a cell that cannot be drawn),
3 python3 lacks matplotlib or pandas.
"""
import argparse
import concurrent.futures
import datetime
import importlib
import multiprocessing
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_MODULES = 3
NEEDED_MODULES = {"matplotlib": "python3-matplotlib", "pandas": "python3-pandas"}

# In the order the report shows them.
FIGURES = ["normalized", "latency_streams", "latency_prefetch", "throughput", "packing", "training", "training_phases",
           "training_sweetspot", "training_memory", "oversubscription", "driver_oversubscription", "bandwidth",
           "um_traffic", "timeline", "peak_memory", "cell_phases"]


def missing_modules():
    """(module, Debian package) of each module python3 cannot import."""
    missing = []
    for module, package in NEEDED_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append((module, package))
    return missing


class Result:
    """A figure drawn (caption set) or not drawn (reason set)."""

    def __init__(self, module, caption=None, reason=None):
        self.name = module.NAME
        self.title = module.TITLE
        self.caption = caption
        self.reason = reason


class Staging:
    """A folder beside the output where the report is drawn; publish() moves what is there into
    the output folder. A report that fails leaves the output folder as it was (or absent)."""

    def __init__(self, output):
        self.output = output

    def __enter__(self):
        parent = os.path.dirname(os.path.abspath(self.output))
        os.makedirs(parent, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix="." + os.path.basename(os.path.abspath(self.output)) + ".tmp-", dir=parent)
        return self

    def publish(self):
        os.makedirs(self.output, exist_ok=True)
        names = sorted(os.listdir(self.path))
        # Refused before anything moves, so that the folder is never left half old, half new.
        for name in names:
            if os.path.isdir(os.path.join(self.output, name)):
                raise IsADirectoryError(f"cannot write {os.path.join(self.output, name)}: it is a folder")
        for name in names:
            os.replace(os.path.join(self.path, name), os.path.join(self.output, name))

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)
        return False


class ReportData:
    """What the figures read: the database, its runs and cells, and the user's choices."""

    def __init__(self, db, timeline_cell):
        self.db = db
        self.runs = db.runs()
        self.cells = db.cells()
        self.ok = self.cells[(self.cells["status"] == "ok") & self.cells["latency_median_ms"].notna()]
        self.timeline_cell = timeline_cell


def draw(name, data, out_dir):
    """One figure, drawn and saved as PNG and SVG (its Result has the caption) or left out (the reason)."""
    from figures.common import Skip, save

    module = importlib.import_module(f"figures.{name}")
    try:
        drawn = module.render(data)
    except Skip as skip:
        return Result(module, reason=str(skip))
    save(drawn.figure, out_dir, module.NAME)
    return Result(module, caption=drawn.caption)


# What a drawing process draws from: the report's data and the folder, set once as the process
# starts (forked, so nothing is copied; a pool's tasks carry only the figure's name).
_worker = {}


def start_worker(data, out_dir):
    """A forked child must not use its parent's SQLite connection: it opens its own."""
    data.db.reopen()
    _worker.update(data=data, out_dir=out_dir)


def draw_in_worker(name):
    return draw(name, _worker["data"], _worker["out_dir"])


class Drawing:
    """The figures, drawn by `jobs` processes forked from this one (each figure is independent of the
    others, and a process draws one at a time); results() waits for them, in the order of FIGURES.
    A context manager: leaving it stops the processes."""

    def __init__(self, data, out_dir, jobs):
        from figures.common import apply_style

        apply_style()
        self.pool = None
        if jobs <= 1:
            self.pending = [draw(name, data, out_dir) for name in FIGURES]
            return
        # An executor rather than multiprocessing.Pool: a drawing process that dies (out of memory)
        # fails the report instead of leaving it waiting for that figure for ever.
        self.pool = concurrent.futures.ProcessPoolExecutor(jobs, multiprocessing.get_context("fork"), start_worker,
                                                           (data, out_dir))
        self.pending = [self.pool.submit(draw_in_worker, name) for name in FIGURES]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        return False

    def results(self):
        if self.pool is None:
            return self.pending
        try:
            return [f.result() for f in self.pending]
        except concurrent.futures.process.BrokenProcessPool as e:
            raise DrawingFailed("a process drawing the figures died before it finished (out of memory?)") from e


class DrawingFailed(Exception):
    """The figures could not be drawn; the message says why."""


def report_jobs():
    """Processes to draw with: the cores this process may run on (a figure takes one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", help="results database")
    parser.add_argument("-o", "--output", required=True, help="folder for the figures and index.html")
    parser.add_argument("--timeline-cell", type=int, help="cell_id whose first traced iteration the timeline shows")
    args = parser.parse_args(argv)

    missing = missing_modules()
    if missing:
        print("sweetspot report needs Python modules that python3 cannot import: "
              + ", ".join(m for m, _ in missing) + ".\nInstall them with scripts/install-deps.sh, or with "
              "apt-get install " + " ".join(p for _, p in missing) + " (Debian 12).", file=sys.stderr)
        return EXIT_MISSING_MODULES

    from figures import timeline
    from html_page import page
    from results_db import BadInput, ResultsDb
    from time_split import time_split, traced_cells

    if not os.path.isfile(args.db):
        print(f"sweetspot report: no such database: {args.db}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        data = ReportData(ResultsDb(args.db), args.timeline_cell)
        if args.timeline_cell is not None:
            timeline.require_window(data.db, args.timeline_cell)
        with Staging(args.output) as staging, Drawing(data, staging.path, min(report_jobs(), len(FIGURES))) as drawing:
            # The time splits are read here while the workers draw.
            splits = []
            if data.db.has("NVTX_EVENTS", "StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
                ok = data.ok.set_index("cell_id", drop=False)
                for cell_id in traced_cells(data.db.con):
                    split = time_split(data.db.con, cell_id) if cell_id in ok.index else None
                    if split is not None:
                        splits.append((ok.loc[cell_id], split))
            results = drawing.results()
            for r in results:
                print(f"report: {r.name}: {r.name}.png, {r.name}.svg" if r.caption
                      else f"report: {r.name}: not drawn: {r.reason}")
            generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            with open(os.path.join(staging.path, "index.html"), "w", encoding="utf-8") as f:
                f.write(page(data.db, data.runs, data.cells, [r for r in results if r.caption],
                             [r for r in results if r.reason], splits, generated))
            staging.publish()
    except (BadInput, OSError) as e:
        print(f"sweetspot report: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DrawingFailed as e:
        print(f"sweetspot report: {e}; nothing was written", file=sys.stderr)
        return EXIT_FAILED
    index = os.path.join(args.output, "index.html")
    drawn = sum(1 for r in results if r.caption)
    print(f"report: {drawn} of {len(results)} figures drawn; {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
