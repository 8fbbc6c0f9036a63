#!/usr/bin/env bash
# Where a login's latency tail comes from: one keyauth-server under the login benchmark's load,
# run after run, with the whole percentile ladder and how the connections are shared between its
# worker threads.
#
#   bash Benchmarks/load/tail.sh [--alg RS256|ES256] [--runs N] [--seconds N] [--connections N]
#                                [--pin off|on|alternate] [-- SERVER-FLAG...]
#
# run.sh prints p50 and p99 per round; this script answers the questions behind a p99:
#   - the ladder p50, p75, p90, p95, p98, p99, p99.5, p99.9 (Benchmarks/load/percentiles.lua),
#     so that a tail of a few stalls can be told from a whole slow mode;
#   - the connections each libmicrohttpd worker holds, counted 3 s into each run from its epoll
#     set in /proc (the set holds the listening socket and the wake-up descriptor besides): the
#     workers accept from one listening socket, so wrk's 32 connections may split 16/16 or 14/18,
#     and a worker's requests wait for the others of its own connections;
#   - with --pin on, each worker thread pinned to its own core (taskset) for every run; with
#     --pin alternate, pinned in the even runs only, for an A/B on the same server and database.
# The server starts once, as run.sh starts it (SQLite file, a log line per request, the
# benchmark's flags, plus SERVER-FLAGs such as --quiet or --threads N), with 200 devices; each
# run gets its own freshly signed assertions, so no run replays another's.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=Benchmarks/load/common.sh
source Benchmarks/load/common.sh

alg=RS256
runs=4
seconds=10
connections=32
pin=off
server_flags=()
while [ $# -gt 0 ]; do
    case $1 in
    --alg) alg=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    --pin) pin=${2:?}; shift 2 ;;
    --) shift; server_flags=("$@"); break ;;
    *) sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64 ;;
    esac
done
case $alg in RS256 | ES256) ;; *) echo "tail.sh: --alg takes RS256 or ES256" >&2; exit 64 ;; esac
case $pin in off | on | alternate) ;; *) echo "tail.sh: --pin takes off, on or alternate" >&2; exit 64 ;; esac
for tool in wrk taskset ss curl python3; do
    command -v "$tool" >/dev/null || { echo "tail.sh: $tool is not installed" >&2; exit 69; }
done
release_products="keyauth-server keyauth-bench"
# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh

work=$(mktemp -d /tmp/keyauth-tail.XXXXXX)
server_pid=""
cleanup() {
    [ -z "$server_pid" ] || { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true; }
    rm -rf "$work"
}
trap cleanup EXIT

issuer=http://keyauth.bench
port=$(free_port)
[ "$alg" = RS256 ] || server_flags+=(--token-alg "$alg")
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --issuer "$issuer" \
    "${bench_server_flags[@]}" "${server_flags[@]}" 2>"$work/server.log" &
server_pid=$!
wait_healthy server "$port"
"$bin/keyauth-bench" load-prepare --devices 200 --assertions 0 --keys-out "$work/keys" --out /dev/null \
    --issuer "$issuer" "http://127.0.0.1:$port"

# workers: the thread ids of libmicrohttpd's worker threads.
workers() {
    local task
    for task in /proc/"$server_pid"/task/*; do
        [ "$(cat "$task/comm")" = MHD-worker ] && echo "${task##*/}"
    done
}
# pin_workers on|off: each worker on a core of its own, or free on every core.
pin_workers() {
    local core=0 task all
    all=$(taskset -p "$$" | awk '{print $NF}')
    for task in $(workers); do
        if [ "$1" = on ]; then
            taskset -p -c "$core" "$task" >/dev/null
            core=$(((core + 1) % $(nproc)))
        else
            taskset -p "$all" "$task" >/dev/null
        fi
    done
}
# split: the connections of each worker's epoll set (the sets that watch the listening socket),
# less that socket and the worker's wake-up descriptor, as "16/16".
split() {
    local listener fd targets counts=()
    listener=$(ss -ltnpH "sport = :$port" | grep -o 'fd=[0-9]*' | head -n 1 | cut -d= -f2)
    for fd in /proc/"$server_pid"/fd/*; do
        [ "$(readlink "$fd")" = "anon_inode:[eventpoll]" ] || continue
        grep -q "^tfd: *$listener " "/proc/$server_pid/fdinfo/${fd##*/}" || continue
        targets=$(grep -c '^tfd:' "/proc/$server_pid/fdinfo/${fd##*/}")
        counts+=($((targets - 2)))
    done
    local IFS=/
    echo "${counts[*]:-?}"
}

per_second=$([ "$alg" = RS256 ] && echo 7000 || echo 30000)
printf '%-4s %-4s %-7s %9s' run pin split logins/s
for p in p50 p75 p90 p95 p98 p99 p99.5 p99.9; do printf ' %7s' "$p"; done
echo
for run in $(seq 1 "$runs"); do
    pinned=$pin
    [ "$pin" != alternate ] || pinned=$([ $((run % 2)) = 0 ] && echo on || echo off)
    pin_workers "$pinned"
    "$bin/keyauth-bench" load-prepare --keys-in "$work/keys" --assertions $((seconds * per_second)) \
        --out "$work/assertions.txt" --issuer "$issuer"
    (sleep 3 && split >"$work/split") &
    sampler=$!
    KEYAUTH_ASSERTIONS="$work/assertions.txt" KEYAUTH_THREADS=2 \
        timeout $((seconds + 60)) wrk -t2 -c"$connections" -d"${seconds}s" -s Benchmarks/load/percentiles.lua \
        "http://127.0.0.1:$port" >"$work/wrk.txt"
    wait "$sampler" || true
    wrk_figures "run $run" "$work/wrk.txt" >/dev/null
    printf '%-4s %-4s %-7s %9.0f' "$run" "$pinned" "$(cat "$work/split")" \
        "$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")"
    awk '$1 == "percentile" {printf " %7.2f", $3}' "$work/wrk.txt"
    echo
done
