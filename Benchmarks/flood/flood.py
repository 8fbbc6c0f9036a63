"""The connection flood driver of Benchmarks/flood/run.sh: floods a running keyauth-server from many
loopback addresses in one pattern while a legitimate client logs in from 127.0.0.1, samples the
server's sockets, descriptors and memory, and prints one JSON line of figures.

    python3 flood.py --port P --server-pid PID --pattern silent|slow|busy|none --addresses N
                     --seconds S --assertions FILE [--warmup S] [--per-address N]
                     [--login-timeout S] [--login-pause S] [--reconnect-delay S] [--trickle S]
                     [--busy-interval S] [--settle S]

Patterns, each connection of each address (127.0.1.1, 127.0.1.2, ...; Linux routes all of
127.0.0.0/8 to lo):
  silent  connects and sends nothing; when the server closes it (or refuses it), reconnects;
  slow    trickles a request's headers one byte every --trickle seconds (a header that never ends);
  busy    sends `GET /healthz` every --busy-interval seconds on a keep-alive connection and reads
          each answer, reconnecting when the server closes it;
  none    no flood (the legitimate client's figures on an idle server, for reference).
A connection the server closes at once (refused by the accept policy, or by a full server) is
reopened after --reconnect-delay seconds, so that a load generator sharing the server's cores does
not spin on connect(2).

The legitimate client opens a NEW connection for every login (Connection: close), the case that
needs a free slot each time, and posts one unused pre-signed assertion (a line of FILE) to
/oauth/token; it starts after --warmup seconds, when the flood holds its slots, and logs in one
after another (--login-pause between) until the end. A login fails on any answer but 200, on a
reset, or after --login-timeout seconds. It runs in a process of its own, with its own event
loop: in the flood's loop its every step waited behind the thousands of callbacks of 9,600
reconnecting connections, and its latencies were the load generator's, not the server's.

Standard library only: this is a load tool, not part of the product.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--server-pid", type=int, required=True)
parser.add_argument("--pattern", choices=["silent", "slow", "busy", "none"], required=True)
parser.add_argument("--addresses", type=int, default=40)
parser.add_argument("--per-address", type=int, default=32, help="connections each address keeps trying to hold")
parser.add_argument("--seconds", type=float, default=25)
parser.add_argument("--warmup", type=float, default=3)
parser.add_argument("--assertions", required=True)
parser.add_argument("--login-timeout", type=float, default=30)
parser.add_argument("--login-pause", type=float, default=0.2)
parser.add_argument("--reconnect-delay", type=float, default=0.1)
parser.add_argument("--trickle", type=float, default=1.0)
parser.add_argument("--busy-interval", type=float, default=1.5)
parser.add_argument("--settle", type=float, default=15, help="seconds to wait for the server's descriptors to come back")
options = parser.parse_args()

HOST = "127.0.0.1"
started = time.monotonic()
stop_at = started + options.seconds
flood_stats = {"connects": 0, "connect_errors": 0, "closed_by_server": 0, "requests": 0, "answers": 0}
samples = []  # (seconds since start, connection sockets, descriptors, RSS KiB)


def source_address(index):
    """The index-th flood address: 127.0.1.1 ... 127.0.1.254, 127.0.2.1, ..."""
    return "127.0.%d.%d" % (1 + index // 254, 1 + index % 254)


def server_figures():
    """(connection sockets, all descriptors, RSS KiB) of the server, or None once it is gone.
    Connection sockets: every socket descriptor but the listeners (counted at the start)."""
    try:
        sockets = descriptors = 0
        for name in os.listdir("/proc/%d/fd" % options.server_pid):
            descriptors += 1
            try:
                if os.readlink("/proc/%d/fd/%s" % (options.server_pid, name)).startswith("socket:"):
                    sockets += 1
            except OSError:
                pass
        with open("/proc/%d/status" % options.server_pid) as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        return sockets, descriptors, rss
    except (OSError, StopIteration):
        return None


async def open_from(source):
    return await asyncio.open_connection(HOST, options.port, local_addr=(source, 0))


async def close(writer):
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ConnectionError):
        pass


async def silent(reader, writer):
    """Holds the connection without a byte until the server closes it."""
    await reader.read(1)


async def slow(reader, writer):
    """Sends a request line and then one header byte per --trickle seconds, for ever."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    closed = asyncio.ensure_future(reader.read(1))
    index = 0
    while not closed.done():
        writer.write(head[index:index + 1] if index < len(head) else b"a")
        index += 1
        try:
            await writer.drain()
        except (OSError, ConnectionError):
            break
        await asyncio.wait([closed], timeout=options.trickle)
    closed.cancel()
    if closed.done() and not closed.cancelled():
        closed.exception()  # a reset is how the server closes it: retrieved, so asyncio does not report it


async def read_answer(reader):
    """Reads one HTTP answer (headers and a Content-Length body); its status, or None at EOF."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def busy(reader, writer):
    """A cheap valid request every --busy-interval seconds, keep-alive, until the server closes."""
    while time.monotonic() < stop_at:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        flood_stats["requests"] += 1
        await writer.drain()
        await read_answer(reader)
        flood_stats["answers"] += 1
        await asyncio.sleep(options.busy_interval)


async def flood_connection(source, behaviour):
    """One of an address's connections: opens it, behaves, and reopens it when it ends."""
    while time.monotonic() < stop_at:
        opened = time.monotonic()
        try:
            reader, writer = await open_from(source)
        except OSError:
            flood_stats["connect_errors"] += 1
            await asyncio.sleep(options.reconnect_delay)
            continue
        flood_stats["connects"] += 1
        try:
            await asyncio.wait_for(behaviour(reader, writer), timeout=max(stop_at - time.monotonic(), 0.01))
            flood_stats["closed_by_server"] += 1
        except asyncio.TimeoutError:
            pass
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
            flood_stats["closed_by_server"] += 1
        await close(writer)
        if time.monotonic() - opened < 1:
            await asyncio.sleep(options.reconnect_delay)


logins = []  # (seconds since the client started, latency seconds, ok, detail)


async def legitimate_client(assertions):
    """Logs in from 127.0.0.1 on a new connection each time until the end."""
    await asyncio.sleep(options.warmup)
    client_started = time.monotonic()
    form_prefix = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion="
    for assertion in assertions:
        if time.monotonic() >= stop_at:
            break
        body = (form_prefix + assertion).encode()
        request = (
            b"POST /oauth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % len(body)
        ) + body
        begun = time.monotonic()
        detail = ""
        writer = None
        try:
            async def login():
                nonlocal writer
                reader, writer = await open_from("127.0.0.1")
                writer.write(request)
                await writer.drain()
                return await read_answer(reader)

            status = await asyncio.wait_for(login(), timeout=options.login_timeout)
            ok = status == 200
            detail = str(status)
        except asyncio.TimeoutError:
            ok, detail = False, "timeout"
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
            ok, detail = False, type(error).__name__
        if writer is not None:
            await close(writer)
        logins.append((begun - client_started, time.monotonic() - begun, ok, detail))
        await asyncio.sleep(options.login_pause)
    return client_started


async def sampler():
    while time.monotonic() < stop_at:
        figures = server_figures()
        if figures is None:
            return
        samples.append((time.monotonic() - started,) + figures)
        await asyncio.sleep(0.5)


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


async def main():
    baseline = server_figures()
    if baseline is None:
        sys.exit("flood.py: no server process %d" % options.server_pid)
    behaviour = {"silent": silent, "slow": slow, "busy": busy}.get(options.pattern)
    tasks = [asyncio.ensure_future(sampler())]
    if behaviour is not None:
        for index in range(options.addresses):
            for _ in range(options.per_address):
                tasks.append(asyncio.ensure_future(flood_connection(source_address(index), behaviour)))
    await asyncio.gather(*tasks, return_exceptions=True)
    flood_end = time.monotonic()
    # The descriptors should come back to the baseline once the flood has hung up.
    after = server_figures()
    while after is not None and after[1] > baseline[1] + 2 and time.monotonic() - flood_end < options.settle:
        await asyncio.sleep(0.25)
        after = server_figures()
    return baseline, after


def client_process(assertions_path, results):
    """The legitimate client in a process of its own: sends back its start and its logins."""
    with open(assertions_path) as handle:
        assertions = [line.strip() for line in handle if line.strip()]
    client_started = asyncio.run(legitimate_client(assertions))
    results.send((client_started, logins))
    results.close()


# Forked before the flood opens anything; CLOCK_MONOTONIC (time.monotonic) is one clock for both.
receiving, sending = multiprocessing.Pipe(duplex=False)
client = multiprocessing.get_context("fork").Process(target=client_process, args=(options.assertions, sending))
client.start()
sending.close()
baseline, after = asyncio.run(main())
if not receiving.poll(options.login_timeout + 10):
    client.kill()
    sys.exit("flood.py: the legitimate client did not report")
client_started, logins = receiving.recv()
client.join(5)
window = [s for s in samples if s[0] >= options.warmup]
successes = [start + latency for start, latency, ok, _ in logins if ok]
latencies = [latency for _, latency, ok, _ in logins if ok]
client_seconds = options.seconds - options.warmup
# The longest time without a successful login: from the client's start to the first success,
# between successes, and from the last success to the end.
marks = [0.0] + sorted(successes) + [client_seconds]
failures = [detail for _, _, ok, detail in logins if not ok]
result = {
    "pattern": options.pattern,
    "addresses": options.addresses if options.pattern != "none" else 0,
    "seconds": options.seconds,
    "held_mean": round(statistics.mean(s[1] for s in window) - baseline[0], 1) if window else None,
    "held_max": max(s[1] for s in window) - baseline[0] if window else None,
    "logins": len(logins),
    "ok": len(successes),
    "failures": len(failures),
    "failure_kinds": {kind: failures.count(kind) for kind in sorted(set(failures))},
    "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
    "p99_ms": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
    "max_ms": round(1000 * max(latencies), 1) if latencies else None,
    "first_ok_s": round(min(successes), 2) if successes else None,
    "longest_gap_s": round(max(b - a for a, b in zip(marks, marks[1:])), 2),
    "rss_max_kib": max(s[3] for s in samples) if samples else None,
    "fds_before": baseline[1],
    "fds_max": max(s[2] for s in samples) if samples else None,
    "fds_after": after[1] if after else None,
    "server_alive": after is not None,
    "flood": flood_stats,
}
print(json.dumps(result))
