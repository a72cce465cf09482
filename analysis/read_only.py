"""Opening a sweetspot results database to read it, leaving nothing beside it: for the report
(results_db.py) and for `sweetspot summary`'s bound check (beaten_bounds.py). Standard library only."""
import os
import pathlib
import sqlite3


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
