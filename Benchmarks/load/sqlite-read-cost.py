#!/usr/bin/env python3
"""What a login's device read costs in SQLite, against what a cache of devices would still pay.

  sqlite-read-cost.py DB [--reads N]

DB is a keyauth-server SQLite file with devices in it (Benchmarks/load/scale-filler.py fills
one). The script opens it read-only in WAL mode, as the server's read connections do, and times
N calls (default 200,000, best of 3) of each of these, through one prepared statement each:

  baseline      SELECT ?                      no table: the caller's and SQLite's call overhead
  data_version  PRAGMA data_version           a read transaction and nothing else: what a cache
                                              of devices must still do per login to see another
                                              process's revocation (keyauth-server revoke KID)
  status        SELECT status ... WHERE kid   the lookup by primary key, one column
  device        SELECT <11 columns> ... kid   the login's device read, as the server makes it

It prints microseconds per call, and each minus the baseline (the work inside SQLite). Python's
own per-call cost is in the baseline, so the differences are what matters, not the totals.
"""

import random
import sqlite3
import sys
import time

DEVICE_COLUMNS = ("kid, user_name, name, public_key_pem, status, created_at, approved_at, revoked_at, "
                  "last_login_at, registered_from, tier")


def per_call(db, sql, arguments, reads):
    """Best of 3 rounds of READS calls, microseconds per call."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for i in range(reads):
            db.execute(sql, arguments[i % len(arguments)]).fetchone()
        best = min(best, (time.perf_counter() - started) / reads * 1e6)
    return best


def main(args):
    if not args or args[0].startswith("-"):
        sys.exit(__doc__.split("\n\n")[1])
    path, reads = args[0], 200_000
    if args[1:2] == ["--reads"] and len(args) == 3:
        reads = int(args[2])
    elif len(args) != 1:
        sys.exit(__doc__.split("\n\n")[1])
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, cached_statements=16)
    if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        sys.exit("sqlite-read-cost.py: the database is not in WAL mode; start keyauth-server on it once")
    kids = [row[0] for row in db.execute("SELECT kid FROM devices LIMIT 1000")]
    if not kids:
        sys.exit("sqlite-read-cost.py: the database has no devices; fill it with scale-filler.py")
    random.Random(1).shuffle(kids)
    by_kid = [(kid,) for kid in kids]
    rows = [
        ("baseline", "SELECT ?", by_kid),
        ("data_version", "PRAGMA data_version", [()]),
        ("status", "SELECT status FROM devices WHERE kid = ?", by_kid),
        ("device", f"SELECT {DEVICE_COLUMNS} FROM devices WHERE kid = ?", by_kid),
    ]
    times = {name: per_call(db, sql, arguments, reads) for name, sql, arguments in rows}
    print(f"SQLite {sqlite3.sqlite_version}, {len(kids)} devices read in turn, {reads} calls each, best of 3")
    print(f"{'':14}{'us/call':>9}{'minus baseline':>16}")
    for name, _, _ in rows:
        print(f"{name:14}{times[name]:9.2f}{times[name] - times['baseline']:16.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
