#!/usr/bin/env bash
# Load benchmark of POST /oauth/token on PostgreSQL: one keyauth-server, then two on the same
# database (as behind a load balancer), with one server on SQLite for reference, in one run.
#
#   bash Benchmarks/load/run-postgres.sh [DEVICES] [SECONDS] [CONNECTIONS]
#
# Run as root: it starts its own PostgreSQL cluster with .ci/postgres.sh (loopback only) and
# gives each PostgreSQL configuration a fresh schema, dropped at the end. Registers DEVICES
# RSA-2048 keys with each database, pre-signs unique assertions, and drives:
#   sqlite-1      one server on SQLite: wrk -t2 -cCONNECTIONS
#   postgres-1    one server on PostgreSQL: wrk -t2 -cCONNECTIONS
#   postgres-2    two servers on one PostgreSQL schema: two wrk -t1 -c(CONNECTIONS/2) at once,
#                 one per server, each with its own half of the assertions (a jti accepted by
#                 one server is a replay for the other); the rates are summed.
# and prints logins/s, latency percentiles, non-2xx answers, the CPU time the servers and the
# PostgreSQL processes spent per login, how busy all cores were meanwhile (from /proc/stat: the
# machine's whole load, so other programs count too) and each server's peak memory (VmHWM).
# PostgreSQL runs on the same cores as the servers and wrk, so its CPU time is part of
# every PostgreSQL figure.
#
# Environment: SCRATCH_PATH, the SwiftPM build directory (default .build).
set -euo pipefail
[ -n "${KEYAUTH_BENCH_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/../.."
devices=${1:-200}
seconds=${2:-10}
connections=${3:-32}
scratch=${SCRATCH_PATH:-.build}
half=$(((connections + 1) / 2))

bash scripts/install-deps.sh
swift build -c release --scratch-path "$scratch" --product keyauth-server >&2
swift build -c release --scratch-path "$scratch" --product keyauth-bench >&2
bin=$(swift build -c release --scratch-path "$scratch" --show-bin-path)

eval "$(bash .ci/postgres.sh)"
base_url=$KEYAUTH_TEST_POSTGRES_URL
suffix=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
schemas=("keyauth_bench_${suffix}_1" "keyauth_bench_${suffix}_2")
schema_url() { echo "$base_url?options=-csearch_path%3D$1&application_name=$1"; }

work=$(mktemp -d /tmp/keyauth-load-pg.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    for s in "${schemas[@]}"; do psql -X -q "$base_url" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true; done
    rm -rf "$work"
}
trap cleanup EXIT
for s in "${schemas[@]}"; do psql -X -q -v ON_ERROR_STOP=1 "$base_url" -c "CREATE SCHEMA $s" >/dev/null; done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# One issuer for every server, so that one set of assertions serves them all.
issuer="http://keyauth.bench"

# start NAME DB: starts a server, waits until it is healthy, sets $port and $pid.
start() {
    local name=$1 db=$2
    port=$(free_port)
    # Open enrollment (loopback only): the benchmark registers first devices without codes. All
    # load comes from one address by design: no per-address limits. No metrics listener: the port
    # after the free one found above may be taken. A log line for every request, as in production.
    "$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$db" --issuer "$issuer" --rate-limit 100000 \
        --registration-limit 100000 --max-connections-per-address 0 --metrics-listen off \
        --enrollment open 2>"$work/$name.log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && return 0; sleep 0.1; done
    echo "server $name did not start: $(cat "$work/$name.log")" >&2
    exit 1
}
# One at a time: the second server on a schema must find the first one's signing key.
start sqlite-1 "$work/bench.db"
sqlite_port=$port sqlite_pid=$pid
start postgres-1 "$(schema_url "${schemas[0]}")"
pg1_port=$port pg1_pid=$pid
start postgres-2a "$(schema_url "${schemas[1]}")"
pg2a_port=$port pg2a_pid=$pid
start postgres-2b "$(schema_url "${schemas[1]}")"
pg2b_port=$port pg2b_pid=$pid

# Enough unique assertions for the fastest plausible rate, valid for 280 s. Each database sees
# each jti once: the single servers use them all, the pair splits them (odd and even lines).
count=$((seconds * 12000))
echo "== registering $devices RSA-2048 keys with 3 databases and signing $count assertions" >&2
"$bin/keyauth-bench" load-prepare --devices "$devices" --assertions "$count" --out "$work/assertions.txt" \
    --issuer "$issuer" "http://127.0.0.1:$sqlite_port" "http://127.0.0.1:$pg1_port" "http://127.0.0.1:$pg2a_port"
awk 'NR % 2 == 1' "$work/assertions.txt" >"$work/assertions-a.txt"
awk 'NR % 2 == 0' "$work/assertions.txt" >"$work/assertions-b.txt"

# The CPU the servers and PostgreSQL spend per login says more than the rate on a shared
# machine: other programs take cores away, but not from a login's own cost.
ticks=$(getconf CLK_TCK)
# machine: total and idle (with iowait) ticks of all cores so far.
machine() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6}' /proc/stat; }
# ticks PID...: user and system ticks the processes used so far (those gone count 0).
process_ticks() {
    local total=0 pid
    for pid in "$@"; do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
postgres_ticks() { mapfile -t ids < <(pgrep -x postgres || true); process_ticks "${ids[@]}"; }

# drive NAME PORT THREADS CONNECTIONS ASSERTIONS: one wrk run, output in $work/NAME.txt.
drive() {
    KEYAUTH_ASSERTIONS="$5" KEYAUTH_THREADS="$3" \
        wrk -t"$3" -c"$4" -d"${seconds}s" --latency -s Benchmarks/load/login.lua "http://127.0.0.1:$2" \
        >"$work/$1.txt"
}
field() { awk -v key="$2" '$1 == key {print $2}' "$work/$1.txt"; }
rate() { awk '/Requests\/sec/ {print $2}' "$work/$1.txt"; }
requests() { awk '/requests in/ {print $1}' "$work/$1.txt"; }
non2xx() { awk '/Non-2xx/ {n = $5} END {print n + 0}' "$work/$1.txt"; }
peak() { awk '/VmHWM/ {printf "%.1f MiB", $2 / 1024}' "/proc/$1/status"; }
# per_login TICKS REQUESTS: CPU milliseconds per request.
per_login() { awk -v t="$1" -v n="$2" -v hz="$ticks" 'BEGIN {printf "%.2f", n ? 1000 * t / hz / n : 0}'; }

# measure NAME WRK_NAMES SERVER_PIDS: runs the wrk runs WRK_NAMES (space-separated
# "name:port:threads:connections:assertions") at once, then prints one line.
measure() {
    local name=$1 runs=$2 pids_of_servers=$3 spec wrk_pids=() names=()
    local machine_before server_before postgres_before run port threads conns file
    read -r -a servers <<<"$pids_of_servers"
    machine_before=$(machine)
    server_before=$(process_ticks "${servers[@]}")
    postgres_before=$(postgres_ticks)
    for spec in $runs; do
        IFS=: read -r run port threads conns file <<<"$spec"
        drive "$run" "$port" "$threads" "$conns" "$file" &
        wrk_pids+=($!)
        names+=("$run")
    done
    wait "${wrk_pids[@]}"
    local server_used=$(($(process_ticks "${servers[@]}") - server_before))
    local postgres_used=$(($(postgres_ticks) - postgres_before))
    local busy total=0 count=0 bad=0 memory="" run pid
    busy=$(awk -v a="$machine_before" -v b="$(machine)" \
        'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.0f%%", 100 * (1 - (y[2] - x[2]) / (y[1] - x[1]))}')
    for run in "${names[@]}"; do
        total=$(awk -v a="$total" -v b="$(rate "$run")" 'BEGIN {printf "%.2f", a + b}')
        count=$((count + $(requests "$run")))
        bad=$((bad + $(non2xx "$run")))
    done
    for pid in "${servers[@]}"; do memory+="${memory:+ + }$(peak "$pid")"; done
    local p50="-" p99="-"
    if [ ${#names[@]} -eq 1 ]; then p50=$(field "${names[0]}" 50%) p99=$(field "${names[0]}" 99%); fi
    printf '%-12s %9s req/s  p50 %-8s p99 %-9s non-2xx %-4s cpu/login: server %s ms, postgres %s ms  machine busy %-4s  peak %s\n' \
        "$name" "$total" "$p50" "$p99" "$bad" "$(per_login "$server_used" "$count")" \
        "$(per_login "$postgres_used" "$count")" "$busy" "$memory"
    if [ ${#names[@]} -gt 1 ]; then
        for run in "${names[@]}"; do
            printf '  %-10s %9s req/s  p50 %-8s p99 %-9s non-2xx %s\n' \
                "$run" "$(rate "$run")" "$(field "$run" 50%)" "$(field "$run" 99%)" "$(non2xx "$run")"
        done
    fi
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

echo "== POST /oauth/token, ${seconds}s per configuration, $connections connections, $(nproc) cores" >&2
measure sqlite-1 "sqlite-1:$sqlite_port:2:$connections:$work/assertions.txt" "$sqlite_pid"
stop "$sqlite_pid"
measure postgres-1 "postgres-1:$pg1_port:2:$connections:$work/assertions.txt" "$pg1_pid"
stop "$pg1_pid"
measure postgres-2 "postgres-2a:$pg2a_port:1:$half:$work/assertions-a.txt \
postgres-2b:$pg2b_port:1:$half:$work/assertions-b.txt" "$pg2a_pid $pg2b_pid"
