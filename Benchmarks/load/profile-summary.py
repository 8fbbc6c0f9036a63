#!/usr/bin/env python3
"""Where a server's CPU went, from `perf record -g` samples, in the categories of a login.

    perf script -i perf.data | python3 Benchmarks/load/profile-summary.py [LOGINS]

Each sample goes to the first category that matches, its leaf function first (libcrypto, SQLite,
malloc, reference counting), then the frames below it (the WAL fsync, TCP, wake-ups, the request
logic, libmicrohttpd). OpenSSL and SQLite are built without frame pointers, so a sample inside
them has no callers: it is counted by library, whoever called it. With LOGINS (the logins served
while recording) the table also shows microseconds of CPU per login.

"""
import collections
import re
import sys

# (category, where to look, pattern): "leaf" matches the sampled function, "stack" any frame.
CATEGORIES = [
    ("RSA sign and verify, SHA-256 (libcrypto)", "leaf", r"libcrypto"),
    ("fsync of the SQLite log (group commit thread)", "stack", r"fdatasync"),
    ("SQLite (statements, COMMIT, WAL writes, locks)", "leaf", r"libsqlite3"),
    ("SQLite (statements, COMMIT, WAL writes, locks)", "stack", r"sqlite3_|__x64_sys_pwrite64|__x64_sys_pread64"),
    ("allocation (malloc, free)", "leaf",
     r"\b(malloc|cfree|free|_int_malloc|_int_free|malloc_consolidate|unlink_chunk[\w.]*|__malloc_usable_size|"
     r"swift_allocObject|swift_slowAlloc|swift_slowDealloc|swift_deallocClassInstance|tcache\w*)\b"),
    ("reference counting (retain, release)", "leaf", r"swift_(retain|release|bridgeObject)|RefCounts"),
    ("kernel TCP (loopback send and receive)", "stack",
     r"sendmsg|sendto|recvfrom|__libc_recv|__libc_send|tcp_|net_rx|handle_softirqs|__napi_poll"),
    ("thread wake-ups and switches (epoll, futex, scheduler)", "stack",
     r"epoll_wait|epoll_ctl|futex|__schedule|schedule_timeout|finish_task_switch|syscall$"),
    ("request logic in Swift (form, JSON, base64, claims, token)", "stack", r"9ResponderC7respond2to"),
    ("HTTP (libmicrohttpd, its callbacks)", "stack", r"libmicrohttpd|AccessHandler|httpServer"),
    ("kernel, other", "leaf", r"\[kernel"),
]


def samples(lines):
    """Yields each sample's CPU nanoseconds and frames, leaf first, as 'symbol (library)'."""
    frames, period = [], 0
    for line in lines:
        if not line.strip():
            if frames:
                yield period, frames
            frames = []
        elif line[0] in " \t":
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                frames.append(re.sub(r"\+0x[0-9a-f]+", "", parts[1]))
        else:
            frames = []
            match = re.search(r"(\d+) cpu-clock", line)
            period = int(match.group(1)) if match else 0
    if frames:
        yield period, frames


def category(frames):
    for name, where, pattern in CATEGORIES:
        scope = frames[:1] if where == "leaf" else frames
        if any(re.search(pattern, frame) for frame in scope):
            return name
    return "other"


def main():
    logins = float(sys.argv[1]) if len(sys.argv) > 1 else 0
    nanoseconds = collections.Counter()
    count = 0
    for period, frames in samples(sys.stdin):
        nanoseconds[category(frames)] += period
        count += 1
    total = sum(nanoseconds.values())
    if total == 0:
        sys.exit("profile-summary: no samples")
    print(f"{'share':>7}  {'us/login' if logins else '':>8}  where the CPU went ({count} samples, {total / 1e9:.2f} s)")
    for name, spent in nanoseconds.most_common():
        per_login = f"{spent / 1000 / logins:8.1f}" if logins else ""
        print(f"{100 * spent / total:6.1f}%  {per_login:>8}  {name}")


if __name__ == "__main__":
    main()
