#!/usr/bin/env bash
# Load benchmark of POST /oauth/token: keyauth-server (SQLite, replay protection and durable
# storage on) against a minimal Node.js server that only checks the signature, in one run.
#
#   bash Benchmarks/load/run.sh [DEVICES] [SECONDS] [CONNECTIONS]
#
# Registers DEVICES RSA-2048 keys with each server, pre-signs unique assertions, drives each
# server with wrk (2 threads, CONNECTIONS keep-alive connections) for SECONDS, and prints
# logins/s, latency percentiles and the server's peak memory (VmHWM).
set -euo pipefail
[ -n "${KEYAUTH_BENCH_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/../.."
devices=${1:-200}
seconds=${2:-10}
connections=${3:-32}

bash scripts/install-deps.sh
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth-bench >&2
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/keyauth-load.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

keyauth_port=$(free_port)
# Open enrollment (development mode, loopback only): the benchmark registers first devices
# without enrollment codes. All load comes from one address by design: no per-address limits.
# No metrics listener: the port after the free one found above may be taken.
"$bin/keyauth-server" serve --listen "127.0.0.1:$keyauth_port" --db "$work/bench.db" --rate-limit 100000 --quiet \
    --registration-limit 100000 --max-connections-per-address 0 --metrics-listen off --enrollment open 2>/dev/null &
keyauth_pid=$!
pids+=("$keyauth_pid")
node_port=$(free_port)
node Benchmarks/load/node-baseline.js "$node_port" &
node_pid=$!
pids+=("$node_pid")
for port in "$keyauth_port" "$node_port"; do
    for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
    curl -s -o /dev/null "http://127.0.0.1:$port/" || { echo "server on port $port did not start" >&2; exit 1; }
done

# Enough unique assertions for the fastest plausible rate, valid for 280 s.
count=$((seconds * 12000))
echo "== registering $devices RSA-2048 keys and signing $count assertions" >&2
"$bin/keyauth-bench" load-prepare --devices "$devices" --assertions "$count" --out "$work/assertions.txt" \
    --issuer "http://127.0.0.1:$keyauth_port" "http://127.0.0.1:$keyauth_port" "http://127.0.0.1:$node_port"

run() {
    local name=$1 port=$2 pid=$3
    KEYAUTH_ASSERTIONS="$work/assertions.txt" KEYAUTH_THREADS=2 \
        wrk -t2 -c"$connections" -d"${seconds}s" --latency -s Benchmarks/load/login.lua "http://127.0.0.1:$port" \
        >"$work/$name.txt"
    local rate p50 p99 non2xx peak
    rate=$(awk '/Requests\/sec/ {print $2}' "$work/$name.txt")
    p50=$(awk '$1 == "50%" {print $2}' "$work/$name.txt")
    p99=$(awk '$1 == "99%" {print $2}' "$work/$name.txt")
    non2xx=$(awk '/Non-2xx/ {print $5}' "$work/$name.txt")
    peak=$(awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/$pid/status")
    printf '%-16s %10s req/s   p50 %-9s p99 %-9s non-2xx %-6s peak memory %s\n' \
        "$name" "$rate" "$p50" "$p99" "${non2xx:-0}" "$peak"
}
echo "== POST /oauth/token, wrk -t2 -c$connections -d${seconds}s, $(nproc) cores" >&2
run keyauth-server "$keyauth_port" "$keyauth_pid"
run node-baseline "$node_port" "$node_pid"
