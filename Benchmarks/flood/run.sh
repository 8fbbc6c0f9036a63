#!/usr/bin/env bash
# Connection floods against keyauth-server's DEFAULT connection limits (1000 in total, 32 per
# address, fair share 4 under pressure), while a legitimate client logs in.
#
#   bash Benchmarks/flood/run.sh [--seconds N] [--warmup N] [--addresses "40 100 300"]
#                                [--patterns "silent slow busy"] [--per-address N] [--server-nofile N]
#                                [--time-limit N]
#
# For the reference run (pattern "none": no flood) and then for each pattern and each number of
# addresses, a fresh keyauth-server (binaries from $KEYAUTH_BENCH_BIN, else release builds made
# now: Benchmarks/release-bin.sh) on a fresh SQLite file, with open enrollment and high rate
# limits so that the legitimate client is never rate-limited, but the default connection limits,
# started under `ulimit -n NOFILE` (default 1024: the soft limit a login shell or a systemd
# service gets unless raised); it registers one device (`keyauth-bench load-prepare`), pre-signs
# its assertions, and runs flood.py for SECONDS (default 25):
#   silent  every flood address (127.0.1.1, 127.0.1.2, ...) keeps 32 connections (--per-address)
#           open without sending a byte, reopening each one the server closes;
#   slow    the same connections trickle a request's headers, one byte a second;
#   busy    the same connections send GET /healthz every 1.5 s (keep-alive), the case
#           THREAT-MODEL.md says the fair share does not protect;
# while a client from 127.0.0.1 logs in (POST /oauth/token with a fresh assertion) from WARMUP
# seconds on, one login after another, each on a NEW connection (Connection: close), the case
# that needs a free slot every time. Then it checks that the server answers /healthz, that its
# descriptors came back, and that it exits 0 on SIGTERM within 20 s, and prints a table: the
# connection slots the flood held (the server's sockets, sampled twice a second), the logins
# (ok/all, p50, p99, max latency, the first success and the longest time without one), the
# server's peak RSS and descriptors (before, peak, after), and the checks.
#
# Exit status 1 when any check failed: the server died, stopped answering /healthz, kept
# descriptors, did not exit cleanly, or let the legitimate client go longer than the request
# deadline (10 s) without a login.
set -euo pipefail
cd "$(dirname "$0")/../.."
arguments=("$@")
seconds=25
warmup=3
addresses="40 100 300"
patterns="silent slow busy"
server_nofile=1024
per_address=32
time_limit=""
usage() {
    sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=${2:?}; shift 2 ;;
    --warmup) warmup=${2:?}; shift 2 ;;
    --addresses) addresses=${2:?}; shift 2 ;;
    --patterns) patterns=${2:?}; shift 2 ;;
    --per-address) per_address=${2:?}; shift 2 ;;
    --server-nofile) server_nofile=${2:?}; shift 2 ;;
    --time-limit) time_limit=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown argument $1" >&2; usage ;;
    esac
done
for tool in curl python3 timeout; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 69; }
done
read -r -a address_counts <<<"$addresses"
read -r -a pattern_list <<<"$patterns"
runs=$((1 + ${#pattern_list[@]} * ${#address_counts[@]}))
# Everything under one time limit: per run the flood, its warm-up and settling, the server's start
# and stop, with room to spare.
if [ -z "${KEYAUTH_FLOOD_TIMED:-}" ]; then
    [ -n "$time_limit" ] || time_limit=$((runs * (seconds + 90) + 600))
    exec env KEYAUTH_FLOOD_TIMED=1 timeout --kill-after=15 "$time_limit" bash "$0" "${arguments[@]}"
fi

release_products="keyauth-server keyauth-bench"
# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh
# shellcheck source=Benchmarks/load/common.sh
source Benchmarks/load/common.sh

# The flood holds up to 32 sockets per address; the server keeps its own limit (--server-nofile).
ulimit -n "$(ulimit -Hn)"
most=0
for count in "${address_counts[@]}"; do [ "$count" -gt "$most" ] && most=$count; done
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((most * per_address + 64)) ]; then
    echo "run.sh: the flood needs $((most * per_address + 64)) descriptors for $most addresses; the hard limit is" \
        "$(ulimit -n)" >&2
    exit 69
fi

work=$(mktemp -d /tmp/keyauth-flood.XXXXXX)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    if [ -n "${KEYAUTH_FLOOD_KEEP:-}" ]; then echo "run.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

issuer="http://keyauth.bench"
logins=$(((seconds + 5) * 20))
: >"$work/results"
# run PATTERN ADDRESSES: one server, one flood; appends its figures to $work/results.
run() {
    local pattern=$1 count=$2 port healthz exit_status nofile
    port=$(free_port)
    rm -f "$work/server.db"*
    (
        ulimit -Sn "$server_nofile"
        exec "$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --issuer "$issuer" \
            --enrollment open --rate-limit 100000 --registration-limit 100000 --metrics-listen off
    ) 2>"$work/server.log" &
    server_pid=$!
    wait_healthy server "$port"
    nofile=$(awk '/Max open files/ {print $4 "/" $5}' "/proc/$server_pid/limits")
    "$bin/keyauth-bench" load-prepare --devices 1 --assertions "$logins" --out "$work/assertions.txt" \
        --issuer "$issuer" "http://127.0.0.1:$port" >/dev/null
    echo "== $pattern, $count addresses, ${seconds}s (server pid $server_pid, open files $nofile)" >&2
    timeout --kill-after=5 $((seconds + 60)) python3 Benchmarks/flood/flood.py --port "$port" \
        --server-pid "$server_pid" --pattern "$pattern" --addresses "$count" --seconds "$seconds" \
        --per-address "$per_address" \
        --warmup "$warmup" --assertions "$work/assertions.txt" >"$work/figures.json" 2>"$work/flood.err" || {
        tail -n 5 "$work/flood.err" | sed 's/^/   flood.py: /' >&2
        echo '{"pattern": "'"$pattern"'", "addresses": '"$count"', "error": "flood.py failed"}' >"$work/figures.json"
    }
    healthz=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/healthz" || true)
    exit_status=none
    if kill -TERM "$server_pid" 2>/dev/null; then
        for _ in $(seq 1 200); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$server_pid" 2>/dev/null; then
            exit_status=hung
            kill -KILL "$server_pid" 2>/dev/null || true
        fi
        wait "$server_pid" 2>/dev/null && status=0 || status=$?
        [ "$exit_status" = hung ] || exit_status=$status
    fi
    server_pid=""
    # The server's own lines (the open-file limit, warnings, errors), not the request log.
    grep -v -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' "$work/server.log" | grep -v -E 'listening on|enrollment open|plain http' |
        head -n 5 | sed 's/^/   server: /' >&2 || true
    python3 -c 'import json, sys
figures = json.load(open(sys.argv[1]))
figures.update(healthz=sys.argv[2], exit=sys.argv[3], nofile=sys.argv[4])
print(json.dumps(figures))' "$work/figures.json" "$healthz" "$exit_status" "$nofile" >>"$work/results"
    tail -n 1 "$work/results" >&2
}

run none 0
for pattern in "${pattern_list[@]}"; do
    for count in "${address_counts[@]}"; do run "$pattern" "$count"; done
done

python3 - "$work/results" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
header = ("pattern", "addr", "held", "held max", "logins ok", "p50 ms", "p99 ms", "max ms", "first ok s",
          "longest gap s", "RSS MiB", "fds before/max/after", "nofile", "healthz", "exit", "checks")
failed = False
table = []
for row in rows:
    checks = []
    if "error" in row:
        checks.append(row["error"])
    else:
        if not row["server_alive"]:
            checks.append("server died")
        if row["fds_after"] is not None and row["fds_after"] > row["fds_before"] + 2:
            checks.append("descriptors kept")
        if row["longest_gap_s"] > 10:
            checks.append("no login for %.1f s" % row["longest_gap_s"])
    if row["healthz"] != "200":
        checks.append("healthz %s" % row["healthz"])
    if row["exit"] != "0":
        checks.append("exit %s" % row["exit"])
    failed = failed or bool(checks)
    value = lambda key: "-" if row.get(key) is None else str(row[key])
    table.append((row["pattern"], str(row["addresses"]), value("held_mean"), value("held_max"),
                  "%s/%s" % (value("ok"), value("logins")), value("p50_ms"), value("p99_ms"), value("max_ms"),
                  value("first_ok_s"), value("longest_gap_s"),
                  "-" if row.get("rss_max_kib") is None else "%.1f" % (row["rss_max_kib"] / 1024),
                  "%s/%s/%s" % (value("fds_before"), value("fds_max"), value("fds_after")), row["nofile"],
                  row["healthz"], row["exit"], "; ".join(checks) or "ok"))
widths = [max(len(line[i]) for line in [header] + table) for i in range(len(header))]
for line in [header] + table:
    print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))
for row in rows:
    kinds = row.get("failure_kinds")
    if kinds:
        print("%s %s: failed logins %s; flood %s" % (row["pattern"], row["addresses"], kinds, row.get("flood")))
sys.exit(1 if failed else 0)
PY
