#!/usr/bin/env python3
"""Where a server's CPU went, from `perf record -g` samples, in the categories of a login.

    perf script -i perf.data | python3 Benchmarks/load/profile-summary.py [--steps] [LOGINS]

Each sample goes to the first category that matches, its leaf function first (libcrypto, SQLite,
malloc, reference counting), then the frames below it (the WAL fsync, TCP, wake-ups, the request
logic, libmicrohttpd). OpenSSL and SQLite are built without frame pointers, so a sample inside
them has no callers: it is counted by library, whoever called it. With LOGINS (the logins served
while recording) the table also shows microseconds of CPU per login.

With --outside LOGINS it prints only two numbers: microseconds per login outside libcrypto, and
in all, for a script to collect.

With --steps it shows instead the time under each step of a login (STEPS): every sample with a
step's function anywhere in its frames, so a step includes what it calls. A sample inside
libcrypto or SQLite has no callers and counts in no step. The steps are matched by their Swift
symbols, so a renamed or inlined function drops out of the table until STEPS names it again.

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

# (step, pattern): the steps of an ES256 login, by a function of each, for --steps.
STEPS = [
    ("the log line and metrics, once the answer is settled",
     r"0C3LogPAAE7request_6format|0C7MetricsC13recordRequest|DurabilityScopeC11whenDurable.*ResponderC7respond"),
    ("parsing the assertion", r"DeviceAssertionVerifierV5parse"),
    ("the device read (kept in memory, or read with SQLite)", r"11loginDevice3kid"),
    ("the access token's payload and the token response",
     r"LoginTokenPayloadV9jsonBytes|HTTPResponseV13tokenResponse"),
    ("the form", r"HTTPRequestV8formBody"),
    ("the route", r"RouteTableV5match6method4path"),
    ("collecting the request's headers", r"MHD_get_connection_values"),
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
    arguments = sys.argv[1:]
    steps = "--steps" in arguments
    outside_only = "--outside" in arguments
    arguments = [argument for argument in arguments if argument not in ("--steps", "--outside")]
    logins = float(arguments[0]) if arguments else 0
    nanoseconds = collections.Counter()
    total, count = 0, 0
    for period, frames in samples(sys.stdin):
        total += period
        count += 1
        if not steps:
            nanoseconds[category(frames)] += period
            continue
        for name, pattern in STEPS:
            if any(re.search(pattern, frame) for frame in frames):
                nanoseconds[name] += period
    if total == 0:
        sys.exit("profile-summary: no samples")
    if outside_only:
        outside = total - nanoseconds[CATEGORIES[0][0]]
        print(f"{outside / 1000 / logins:.1f} {total / 1000 / logins:.1f}")
        return
    heading = "time under each step" if steps else "where the CPU went"
    print(f"{'share':>7}  {'us/login' if logins else '':>8}  {heading} ({count} samples, {total / 1e9:.2f} s)")
    for name, spent in nanoseconds.most_common():
        per_login = f"{spent / 1000 / logins:8.1f}" if logins else ""
        print(f"{100 * spent / total:6.1f}%  {per_login:>8}  {name}")
    if logins and not steps:
        outside = total - nanoseconds[CATEGORIES[0][0]]
        print(f"{100 * outside / total:6.1f}%  {outside / 1000 / logins:8.1f}  outside libcrypto"
              f" (all {total / 1000 / logins:.1f} us/login)")

if __name__ == "__main__":
    main()
