#!/usr/bin/env python3
"""Filler devices for Benchmarks/load/run-scale.sh: many registered devices, written straight
into the database, so that logins of the benchmark's real devices can be measured among them.

  scale-filler.py columns          the devices columns a filler row has, comma-separated
  scale-filler.py sqlite DB COUNT  inserts COUNT filler devices into the SQLite file DB, which
                                   no server may have open
  scale-filler.py copy COUNT       writes COUNT filler devices to stdout as PostgreSQL COPY text
                                   (the columns in the order `columns` prints)
  scale-filler.py size DB          checkpoints the SQLite file DB and prints its size with its
                                   WAL, the size of the devices table with its indexes (bytes)
                                   and the number of devices

A filler row is what a real registration stores, with made-up values: an RSA-2048 public key
(a random odd modulus with its top bit set, e = 65537) as SubjectPublicKeyInfo PEM, the same
451 bytes as a real one; as kid its RFC 7638 thumbprint, which no benchmark key has; a user of
its own, active since a time in the past year, approved then, a last login since or none, a
registration address and a tier. The rows come in random user order (users do not register in
alphabetical order), so the indexes grow as they do in service. The same COUNT gives the same
rows every time.
"""

import base64
import hashlib
import os
import random
import sqlite3
import sys
import time

# The devices columns at schema version 16 (Server/Sources/KeyAuthServer/Storage/SQL/SQLSchema.swift).
# The SQLite mode refuses a table with other columns, and run-scale.sh compares PostgreSQL's:
# a new column must get a realistic value here.
COLUMNS = (
    "kid",
    "user_name",
    "name",
    "public_key_pem",
    "status",
    "created_at",
    "approved_at",
    "revoked_at",
    "last_login_at",
    "registered_from",
    "tier",
    "key_protection",
)
# SubjectPublicKeyInfo of an RSA key with a 2048-bit modulus, around the modulus: the algorithm
# rsaEncryption, then INTEGER (257 bytes: 0x00 and the modulus) ... INTEGER 65537.
SPKI_HEAD = bytes.fromhex("30820122300d06092a864886f70d01010105000382010f003082010a0282010100")
SPKI_TAIL = bytes.fromhex("0203010001")
YEAR = 365 * 24 * 3600
LABELS = ("laptop", "desktop", "workstation", "build-host", "jump-host", "tablet")
TIERS = ("software",) * 7 + ("tpm-unverified",) * 2 + ("attested",)
PROTECTIONS = ("pin",) * 8 + ("none",) + (None,)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def devices(count, now):
    """COUNT filler rows, values in COLUMNS order."""
    rng = random.Random(count)
    users = list(range(count))
    rng.shuffle(users)
    for user in users:
        modulus = bytearray(rng.randbytes(256))
        modulus[0] |= 0x80
        modulus[-1] |= 1
        jwk = '{"e":"AQAB","kty":"RSA","n":"%s"}' % b64url(modulus)
        kid = b64url(hashlib.sha256(jwk.encode()).digest())
        body = base64.b64encode(SPKI_HEAD + modulus + SPKI_TAIL).decode()
        lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
        pem = "-----BEGIN PUBLIC KEY-----\n" + lines + "\n-----END PUBLIC KEY-----\n"
        created = now - rng.randrange(YEAR)
        last_login = created + rng.randrange(now - created + 1) if rng.random() < 0.9 else None
        address = "10.%d.%d.%d" % (rng.randrange(256), rng.randrange(256), rng.randrange(1, 255))
        yield (
            kid,
            "user-%07d" % user,
            rng.choice(LABELS),
            pem,
            "active",
            created,
            created,
            None,
            last_login,
            address,
            rng.choice(TIERS),
            rng.choice(PROTECTIONS),
        )


def fill_sqlite(path, count):
    db = sqlite3.connect(path, isolation_level=None)
    found = tuple(row[1] for row in db.execute("PRAGMA table_info(devices)"))
    if sorted(found) != sorted(COLUMNS):
        sys.exit(f"scale-filler.py: devices has the columns {', '.join(found)}; this script writes "
                 f"{', '.join(COLUMNS)}: give it the new ones")
    # One transaction without a WAL (the server turns WAL on again at its start) or fsyncs: a
    # benchmark database that a crash here would only make the run fail. A cache that holds the
    # indexes keeps the random inserts off the disk.
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -262144")
    db.execute("BEGIN")
    placeholders = ", ".join("?" for _ in COLUMNS)
    db.executemany(f"INSERT INTO devices ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                   devices(count, int(time.time())))
    db.execute("COMMIT")
    db.close()


def copy_text(count):
    out = sys.stdout
    for row in devices(count, int(time.time())):
        out.write("\t".join("\\N" if v is None else str(v).replace("\n", "\\n") for v in row) + "\n")


def size(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    count = db.execute("SELECT COUNT(*) FROM devices").fetchone()[0]
    table = db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name IN "
                       "(SELECT name FROM sqlite_schema WHERE tbl_name = 'devices')").fetchone()[0]
    db.close()
    total = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    print(total, table, count)


def main(args):
    if args[:1] == ["columns"] and len(args) == 1:
        print(",".join(COLUMNS))
    elif args[:1] == ["sqlite"] and len(args) == 3:
        fill_sqlite(args[1], int(args[2]))
    elif args[:1] == ["copy"] and len(args) == 2:
        copy_text(int(args[1]))
    elif args[:1] == ["size"] and len(args) == 2:
        size(args[1])
    else:
        sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main(sys.argv[1:])
