#!/usr/bin/env python3
"""Copies results databases into a folder as single files (no -wal/-shm), gzipped when large.

The device tool brings back at most 8 files of at most 16 MiB each, so a sweep's database is
written elsewhere on the GPU machine and exported into $OUT with this: one file per database,
`NAME.db`, or `NAME.db.gz` when larger than --gzip-above MiB.
Usage: export_db.py DEST_DIR DB [DB ...] [--gzip-above MIB]
"""
import argparse
import gzip
import os
import shutil
import sqlite3
import sys


def export(path, dest_dir, gzip_above):
    name = os.path.basename(path)
    plain = os.path.join(dest_dir, name)
    partial = plain + ".partial"
    if os.path.exists(partial):
        os.remove(partial)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.execute("VACUUM INTO ?", (partial,))
    con.close()
    if os.path.getsize(partial) > gzip_above << 20:
        with open(partial, "rb") as src, gzip.open(plain + ".gz", "wb", 6) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(partial)
        return plain + ".gz"
    os.replace(partial, plain)
    return plain


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest_dir")
    parser.add_argument("databases", nargs="+")
    parser.add_argument("--gzip-above", type=int, default=12, help="MiB above which the copy is gzipped")
    args = parser.parse_args()
    os.makedirs(args.dest_dir, exist_ok=True)
    for path in args.databases:
        out = export(path, args.dest_dir, args.gzip_above)
        print(f"{path} -> {out} ({os.path.getsize(out) / (1 << 20):.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
