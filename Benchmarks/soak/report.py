"""Summary and checks of one soak run (Benchmarks/soak/run.sh): prints them, exits 1 on a failure.

Reads the run's folder: samples.csv (the server's RSS, descriptors, threads, CPU every 5 s),
rounds and wrk-N.txt (the login rounds), traffic.json (traffic.py's counts and errors),
metrics.txt (the last /metrics), server.log (the request log), server-exit, rotation, keys.txt.
"""

import argparse
import csv
import json
import os
import re
import statistics
import sys


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return default


def milliseconds(text):
    """wrk's 512.00us, 6.31ms, 1.02s or 2.00m in milliseconds."""
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    if not match:
        return None
    value, unit = float(match.group(1)), match.group(2)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk_round(text):
    """The figures of one wrk run of login.lua."""
    def number(pattern, default=0.0):
        match = re.search(pattern, text)
        return float(match.group(1)) if match else default

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    logins = re.search(r"soak: logins (\d+) spare (\d+)", text)
    p50 = re.search(r"^\s+50%\s+(\S+)", text, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", text, re.M)
    return {
        "rate": number(r"Requests/sec:\s+([0-9.]+)"),
        "p50": milliseconds(p50.group(1)) if p50 else None,
        "p99": milliseconds(p99.group(1)) if p99 else None,
        "non2xx": int(number(r"Non-2xx or 3xx responses: (\d+)")),
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
        "logins": int(logins.group(1)) if logins else None,
        "spare": int(logins.group(2)) if logins else None,
        "complete": "Requests/sec" in text,
    }


def server_log(path):
    """Statuses of the request log, its error lines, and the lines that are not requests."""
    statuses = {}
    errors, other = [], []
    request = re.compile(r"^\S+ \S+ [A-Z]+ \S+ (\d{3}) [0-9.]+ms route=")
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except OSError:
        return statuses, errors, other
    with handle:
        for line in handle:
            match = request.match(line)
            if match:
                statuses[match.group(1)[0] + "xx"] = statuses.get(match.group(1)[0] + "xx", 0) + 1
            elif " error: " in line or '"level":"error"' in line or "*** Program crashed" in line \
                    or "Fatal error" in line:
                errors.append(line.rstrip())
            else:
                other.append(line.rstrip())
    return statuses, errors, other


def metrics_5xx(text):
    total = 0
    for line in text.splitlines():
        match = re.match(r'keyauth_http_requests_total\{.*status="5\d\d".*\} (\d+)', line)
        if match:
            total += int(match.group(1))
    return total


def mean(values):
    return statistics.fmean(values) if values else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--alg", required=True)
    parser.add_argument("--minutes", type=float, required=True)
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--rss-tolerance", type=float, default=10)
    parser.add_argument("--max-wal-mib", type=float, default=64)
    args = parser.parse_args()
    folder = args.dir
    checks = []

    def check(name, met, detail=""):
        checks.append((name, met, detail))

    # The server's life.
    alive, status = (read(os.path.join(folder, "server-exit"), "0 -1").split() + ["-1"])[:2]
    statuses, error_lines, other_lines = server_log(os.path.join(folder, "server.log"))
    clean = alive == "1" and status == "0"
    check("keyauth-server ran to the end and stopped cleanly on SIGTERM", clean,
          "" if clean else f"alive at the end: {alive == '1'}, exit status {status}")

    # Logins.
    rounds = []
    for line in read(os.path.join(folder, "rounds")).splitlines():
        number, started, signed, load = line.split()
        figures = wrk_round(read(os.path.join(folder, f"wrk-{number}.txt")))
        rounds.append({"round": int(number), "start": int(started), "signed": int(signed), "load": load, **figures})
    print(f"== {args.alg} soak: {args.minutes:g} minutes, {os.cpu_count()} cores, "
          f"logins by wrk -t2 -c{args.connections} in {len(rounds)} rounds")
    print(f"{'round':>5} {'start s':>7} {'signed':>7} {'logins':>7} {'logins/s':>9} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'non-2xx':>7} {'sock err':>8} {'spare':>5} {'load':>5}")
    for r in rounds:
        p50 = f"{r['p50']:.2f}" if r["p50"] is not None else "-"
        p99 = f"{r['p99']:.2f}" if r["p99"] is not None else "-"
        print(f"{r['round']:>5} {r['start']:>7} {r['signed']:>7} {r['logins'] or 0:>7} {r['rate']:>9.0f} {p50:>7} "
              f"{p99:>7} {r['non2xx']:>7} {r['socket_errors']:>8} {r['spare'] or 0:>5} {r['load']:>5}")
    logins = sum(r["logins"] or 0 for r in rounds)
    bad_rounds = [r["round"] for r in rounds if not r["complete"] or r["logins"] is None]
    non2xx = sum(r["non2xx"] for r in rounds)
    socket_errors = sum(r["socket_errors"] for r in rounds)
    spare = sum(r["spare"] or 0 for r in rounds)
    if rounds:
        p99s = [r["p99"] for r in rounds if r["p99"] is not None]
        print(f"logins: {logins} in all, {statistics.median(r['rate'] for r in rounds):.0f}/s median of rounds; "
              f"p50 {statistics.median(r['p50'] for r in rounds if r['p50'] is not None):.2f} ms median, "
              f"p99 {statistics.median(p99s):.2f} ms median, {max(p99s):.2f} ms worst round")
    check("every login round ran and reported (wrk and login.lua)",
          len(rounds) == args.rounds and not bad_rounds, f"{len(rounds)} of {args.rounds}, incomplete {bad_rounds}")
    check("logins: no non-2xx answer, socket error or timeout (wrk --timeout 10s), no spare request",
          non2xx == 0 and socket_errors == 0 and spare == 0,
          f"non-2xx {non2xx}, socket errors {socket_errors}, spare {spare}")

    # The other traffic.
    traffic = json.loads(read(os.path.join(folder, "traffic.json"), "{}") or "{}")
    print()
    if traffic:
        seconds = traffic["seconds"]
        print(f"traffic.py, {seconds:.0f} s: answers by kind (per minute; latency p50/p99/max ms; statuses)")
        for kind, count in traffic["counts"].items():
            latency = traffic["latency_ms"].get(kind, {})
            figures = "/".join("-" if latency.get(p) is None else f"{latency[p]:g}" for p in ("p50", "p99", "max"))
            by_status = ", ".join(f"{k} {v}" for k, v in sorted(traffic["statuses"].get(kind, {}).items()))
            print(f"  {kind:15} {count:>7} {count * 60 / seconds:>8.1f}/min  {figures:>20}  {by_status}")
        polls, wake = traffic["long_polls"], traffic["wake_ms"]
        print(f"  long polls: {polls['woken']} woken by a sign-in request, {polls['idle']} held the full 30 s; "
              f"from /bc-authorize to the device seeing it: p50 {wake['p50']} ms, p99 {wake['p99']} ms, "
              f"max {wake['max']} ms ({wake['count']} requests)")
        print(f"  device answers: {traffic['decisions']}; access tokens by signing key: {traffic['token_kids']}")
        for sample in traffic["error_samples"]:
            print(f"  error: {sample}")
    check("traffic.py: every answer as the protocol prescribes, no socket error",
          bool(traffic) and traffic.get("errors") == 0,
          f"{traffic.get('errors', 'no summary')} errors" + ("; see traffic.err" if not traffic else ""))

    # 5xx, from the server's own count and its log.
    metrics = read(os.path.join(folder, "metrics.txt"))
    from_metrics = metrics_5xx(metrics) if metrics else None
    from_log = statuses.get("5xx", 0)
    print()
    print(f"server request log: {sum(statuses.values())} requests, by class "
          f"{', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}; {len(error_lines)} error lines")
    for line in error_lines[:10]:
        print(f"  {line}")
    check("no 5xx answer (metrics and request log)", from_log == 0 and not from_metrics and not error_lines,
          f"metrics {from_metrics if from_metrics is not None else 'unavailable'}, log {from_log}, "
          f"error lines {len(error_lines)}")

    # Memory and descriptors.
    with open(os.path.join(folder, "samples.csv"), encoding="ascii") as handle:
        samples = [{k: float(v or 0) for k, v in row.items()} for row in csv.DictReader(handle) if row.get("rss_kib")]
    # Only while the load ran: run.sh waits for the last long polls to end before the stop.
    load_end = os.path.join(folder, "load-end")
    if os.path.exists(load_end):
        with open(load_end, encoding="ascii") as handle:
            until = float(handle.read().strip() or "inf")
        samples = [s for s in samples if s["seconds"] <= until]
    if len(samples) >= 8:
        end = samples[-1]["seconds"]
        quarter = [[s for s in samples if q * end / 4 <= s["seconds"] < (q + 1) * end / 4 or
                    (q == 3 and s["seconds"] == end)] for q in range(4)]
        second, last = mean([s["rss_kib"] for s in quarter[1]]), mean([s["rss_kib"] for s in quarter[3]])
        growth = (last / second - 1) * 100 if second else 0.0
        tail = samples[len(samples) // 2:]
        slope = statistics.linear_regression([s["seconds"] for s in tail], [s["rss_kib"] for s in tail]).slope
        fds_second, fds_last = max(s["fds"] for s in quarter[1]), max(s["fds"] for s in quarter[3])
        middle = samples[len(samples) // 2]
        cpu = (samples[-1]["cpu_ticks"] - samples[0]["cpu_ticks"]) / os.sysconf("SC_CLK_TCK")
        print(f"server RSS MiB: start {samples[0]['rss_kib'] / 1024:.1f}, middle {middle['rss_kib'] / 1024:.1f}, "
              f"end {samples[-1]['rss_kib'] / 1024:.1f}, peak (VmHWM) {samples[-1]['hwm_kib'] / 1024:.1f}; "
              f"mean of the 2nd quarter {second / 1024:.1f}, of the last {last / 1024:.1f} ({growth:+.1f}%); "
              f"slope over the second half {slope * 60 / 1024:+.2f} MiB/min")
        first, final = samples[0], samples[-1]
        print(f"  of it, start -> end: heap and other anonymous {first['anon_kib'] / 1024:.1f} -> "
              f"{final['anon_kib'] / 1024:.1f}, mapped files {first['file_kib'] / 1024:.1f} -> "
              f"{final['file_kib'] / 1024:.1f}, shared memory {first['shmem_kib'] / 1024:.1f} -> "
              f"{final['shmem_kib'] / 1024:.1f}; database file {final['db_kib'] / 1024:.1f} MiB, its WAL "
              f"{final['wal_kib'] / 1024:.1f} MiB at the end (largest {max(s['wal_kib'] for s in samples) / 1024:.1f})")
        print(f"server descriptors: {samples[0]['fds']:.0f} at the start, largest {fds_second:.0f} in the 2nd "
              f"quarter and {fds_last:.0f} in the last; threads {samples[0]['threads']:.0f} to "
              f"{samples[-1]['threads']:.0f}; CPU {cpu:.0f} s in {end:.0f} s ({cpu / max(end, 1):.2f} cores); "
              f"load average {mean([s['load1'] for s in samples]):.1f} (mean of samples)")
        check(f"RSS flat: last quarter's mean within {args.rss_tolerance:g}% of the 2nd quarter's",
              growth <= args.rss_tolerance, f"{growth:+.1f}%")
        check("descriptors flat: last quarter's largest count <= 2nd quarter's + 8", fds_last <= fds_second + 8,
              f"{fds_second:.0f} then {fds_last:.0f}")
        # The group commit checkpoints at most every 250 ms to keep the log to a few MiB; SQLite
        # reuses the log from its start only once a checkpoint has caught up, and never shrinks
        # the file, so its largest size is how far the log ran ahead.
        wal = max(s["wal_kib"] for s in samples) / 1024
        check(f"SQLite log (WAL) file at most {args.max_wal_mib:g} MiB", wal <= args.max_wal_mib, f"{wal:.1f} MiB")
    else:
        check("RSS and descriptors sampled (8 samples or more)", False, f"{len(samples)} samples")

    # The key rotation.
    rotation = read(os.path.join(folder, "rotation")).split()
    if len(rotation) == 2:
        at, kid = int(rotation[0]), rotation[1]
        signed = traffic.get("token_kids", {}).get(kid, 0)
        print(f"signing key rotated at {at} s to {kid}: {signed} access tokens of traffic.py signed with it; keys:")
        for line in read(os.path.join(folder, "keys.txt")).splitlines():
            print(f"  {line}")
        if samples and samples[-1]["seconds"] - at >= 120:
            check("tokens signed by the rotated key after the rotation", signed > 0, f"{signed} tokens")
    else:
        check("signing key rotated (keyauth-server keys rotate)", False, read(os.path.join(folder, "rotate.err")))

    if not clean:
        print()
        print("keyauth-server's standard error, apart from request lines (last 30):")
        for line in other_lines[-30:]:
            print(f"  {line}")
        print("last lines of its log:")
        for line in read(os.path.join(folder, "server.log")).splitlines()[-10:]:
            print(f"  {line}")

    # The full request log is evidence only when the server itself misbehaved.
    if not clean or from_log or from_metrics or error_lines:
        open(os.path.join(folder, "keep-log"), "w").close()
    print()
    for name, met, detail in checks:
        print(f"{'ok    ' if met else 'FAILED'} {name}{'' if met or not detail else ': ' + detail}"
              f"{'' if not met or not detail else ' (' + detail + ')'}")
    sys.exit(0 if all(met for _, met, _ in checks) else 1)


if __name__ == "__main__":
    main()
