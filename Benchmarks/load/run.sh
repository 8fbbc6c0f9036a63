#!/usr/bin/env bash
# Login throughput, measured fairly: keyauth-server against a Node.js server that does the same
# work per login, under the same load, in one run.
#
#   bash Benchmarks/load/run.sh [--alg RS256|ES256] [--seconds N] [--rounds N] [--devices N]
#                               [--connections N] [--threads N] [--node-server PATH]
#                               [--ceiling-seconds N] [--profile FILE] [--profile-hz HZ] [--compare-server PATH]
#                               [--replay-cache memory|database] [--compare-replay-cache memory|database]
#                               [--compare-quiet] [--transport] [--floor]
#
# The comparison server is not part of this repository: it is node-fair-login-server.mjs from the
# benchmark folder shared beside it (../shared/bench/ from the repository root by default; pass
# --node-server PATH or set KEYAUTH_NODE_FAIR_SERVER). It runs on node:cluster with one worker per
# core and does per login what keyauth-server does (RS256 verification of the assertion, claim
# checks, a jti replay map, an at+jwt access token signed with ALG), but keeps everything in
# memory: no durable storage.
#
# One invocation:
#   1. builds keyauth-server and keyauth-bench in release mode, or takes them from the directory
#      KEYAUTH_BENCH_BIN (Benchmarks/release-bin.sh);
#   2. measures the machine's signing ceiling, `openssl speed -multi $(nproc)` for the access
#      token's algorithm (rsa2048 for RS256, ecdsap256 for ES256), before and after the runs;
#   3. starts keyauth-server (SQLite file: synchronous=FULL durability; replay cache in memory
#      unless --replay-cache database; a log line for every request, as in production, to a
#      file) and the Node server with the same issuer, registers DEVICES RSA-2048 keys with both (`keyauth-bench load-prepare`), and checks with a few
#      sample assertions that each answers a login with an access token of ALG and refuses the
#      same assertion a second time;
#   4. for each of ROUNDS rounds, signs a fresh set of unique assertions and drives each server
#      with `wrk -t2 -cCONNECTIONS` (keep-alive, the same assertions for both, every one a new
#      jti) for SECONDS, alternating which server goes first; a run with any non-2xx answer or
#      socket error fails the benchmark;
#   5. prints per run logins/s, p50/p99 latency, CPU time per login and peak RSS (VmHWM; for Node
#      the sum over the primary and its workers), then per server the median and spread of the
#      rounds, the ratio to Node (median of the per-round ratios) and to the ceiling, against
#      the targets.
#
# --replay-cache MODE passes --replay-cache to keyauth-server (default: its own, memory on SQLite;
# database fsyncs every claim before the answer, as every version before did).
# --compare-replay-cache MODE adds the same keyauth-server binary with --replay-cache MODE as
# "keyauth-other", to measure the two modes in one run. --compare-quiet adds the same binary with
# --quiet (no per-request log lines) as "keyauth-other", to measure what the log costs.
# --transport also measures the HTTP layer alone, after the login rounds: wrk -t2 -cCONNECTIONS for SECONDS on keyauth-server's JWK set
# (GET /.well-known/jwks.json, the route every service using keyauth polls) and on the Node
# server's trivial GET /healthz, in as many rounds as the logins (alternating which goes first),
# as requests/s, each round's ratio and their median (and keyauth-other's JWK set, once, when
# there is one).
# --threads N passes --threads to keyauth-server (default: its own). --profile FILE records every
# CPU with `perf record -a -g` during keyauth-server's run in every round (FILE for the first,
# FILE.N after), prints where that process's CPU time went in round 1, by category and by step
# of a login (profile-summary.py), and the median of the rounds' CPU outside libcrypto.
# System-wide, because recording one process (`-p`) switches its counters at every context
# switch of its threads, which slowed a login by about a third (2026-12-06). --profile-hz HZ
# samples HZ times a second on each CPU (default 1000): each sample's call chain costs the
# thread it interrupts, and at perf's own 4000 the profiled round spent a quarter more CPU per
# login than the others. At 1000 (some 15,000 samples in 10 s) profiled runs cost a login
# nothing more in one comparison, and 6 to 13% more in others where the machine was slower by as
# much (2026-12-06): take logins/s from a run without --profile, and the split of the CPU from a
# run with it. With --compare-server naming the same binary (and no other --compare or
# --replay-cache option), keyauth-other runs unprofiled in the same rounds: the difference of
# the two servers' measured CPU per login is the profiler's cost, and the summary also gives the
# figure outside libcrypto less that cost (a lower bound: some of the cost may be in libcrypto).
# --compare-server PATH adds another keyauth-server binary (an earlier build, say) as a third
# server, "keyauth-other", under the same load and checks, to measure a change in one run.
# --floor adds "signature-floor" (Benchmarks/load/signature-floor.c, compiled with cc): a server
# whose every answer costs one login's cryptography and nothing else (an RS256 verification and a
# signature with ALG, on libmicrohttpd with one worker per core), to show what any server could
# reach under the same load on this machine; the summary gives keyauth-server's rate as a share of
# it and the floor's own p99.
# ES256: both servers sign access tokens with ES256 (keyauth-server with `--token-alg ES256` on
# its fresh database); the device assertions stay RS256.
set -euo pipefail
[ -n "${KEYAUTH_BENCH_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/../.."
root=$(pwd)
# shellcheck source=Benchmarks/load/common.sh
source Benchmarks/load/common.sh

alg=RS256
seconds=10
rounds=3
devices=200
connections=32
threads=""
replay_cache=""
compare_replay_cache=""
compare_quiet=0
transport=0
profile=""
profile_hz=1000
compare_server=""
floor=0
ceiling_seconds=10
node_server=${KEYAUTH_NODE_FAIR_SERVER:-$root/../shared/bench/node-fair-login-server.mjs}
usage() {
    sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}
while [ $# -gt 0 ]; do
    case $1 in
    --alg) alg=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --devices) devices=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --replay-cache) replay_cache=${2:?}; shift 2 ;;
    --compare-replay-cache) compare_replay_cache=${2:?}; shift 2 ;;
    --compare-quiet) compare_quiet=1; shift ;;
    --transport) transport=1; shift ;;
    --floor) floor=1; shift ;;
    --node-server) node_server=${2:?}; shift 2 ;;
    --ceiling-seconds) ceiling_seconds=${2:?}; shift 2 ;;
    --profile) profile=${2:?}; shift 2 ;;
    --profile-hz) profile_hz=${2:?}; shift 2 ;;
    --compare-server) compare_server=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "run.sh: unknown argument $1" >&2; usage ;;
    esac
done
case $alg in
RS256) ceiling_test=rsa2048 ;;
ES256) ceiling_test=ecdsap256 ;;
*) echo "run.sh: --alg takes RS256 or ES256, not $alg" >&2; exit 64 ;;
esac
if [ ! -f "$node_server" ]; then
    cat >&2 <<EOF
run.sh: the comparison server is missing: $node_server
It is not part of this repository. Pass its path with --node-server PATH or KEYAUTH_NODE_FAIR_SERVER
(it is node-fair-login-server.mjs in the shared benchmark folder, ../shared/bench/ by default).
EOF
    exit 66
fi
for tool in node wrk openssl curl python3; do
    command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 69; }
done
[ "$floor" = 0 ] || command -v cc >/dev/null || { echo "run.sh: --floor needs a C compiler (cc)" >&2; exit 69; }
[ -z "$profile" ] || command -v perf >/dev/null || { echo "run.sh: --profile needs perf" >&2; exit 69; }
if [ -n "$profile" ] && ! perf record -q -a -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
    echo "run.sh: --profile records every CPU (perf record -a), which needs root or" \
        "kernel.perf_event_paranoid <= 0" >&2
    exit 69
fi

release_products="keyauth-server keyauth-bench"
# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh
cores=$(nproc)

keyauth_flags=()
with_keyauth=1
if [ "$alg" != RS256 ]; then
    if "$bin/keyauth-server" --help 2>&1 | grep -q -- "--token-alg"; then
        keyauth_flags+=(--token-alg "$alg")
    else
        echo "run.sh: this keyauth-server signs access tokens with RS256 only (no --token-alg" \
            "option); measuring the Node server with $alg alone" >&2
        with_keyauth=0
    fi
fi
[ -z "$threads" ] || keyauth_flags+=(--threads "$threads")
other_flags=("${keyauth_flags[@]}")
[ -z "$replay_cache" ] || keyauth_flags+=(--replay-cache "$replay_cache")
[ -z "$compare_replay_cache" ] || other_flags+=(--replay-cache "$compare_replay_cache")
[ "$compare_quiet" = 0 ] || other_flags+=(--quiet)

work=$(mktemp -d /tmp/keyauth-load.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# ceiling: sign/s of all cores together for the access token's algorithm.
ceiling() { signing_ceiling "$ceiling_test" "$ceiling_seconds"; }
echo "== signing ceiling: openssl speed -multi $cores -seconds $ceiling_seconds $ceiling_test" >&2
ceiling_before=$(ceiling)

# One issuer for both servers, so that one set of assertions (aud) serves both.
issuer="http://keyauth.bench"
servers=()
declare -A port_by_server pid_by_server
# start_keyauth NAME BINARY FLAGS...: a keyauth-server on a SQLite file of its own.
start_keyauth() {
    local name=$1 binary=$2 port
    shift 2
    port=$(free_port)
    "$binary" serve --listen "127.0.0.1:$port" --db "$work/$name.db" --issuer "$issuer" \
        "${bench_server_flags[@]}" "$@" 2>"$work/$name.log" &
    pid_by_server[$name]=$!
    pids+=("$!")
    port_by_server[$name]=$port
    wait_healthy "$name" "$port"
    servers+=("$name")
}
if [ "$with_keyauth" = 1 ]; then
    start_keyauth keyauth-server "$bin/keyauth-server" "${keyauth_flags[@]}"
    keyauth_pid=${pid_by_server[keyauth-server]}
    if [ -n "$compare_server" ]; then
        start_keyauth keyauth-other "$compare_server" "${other_flags[@]}"
    elif [ -n "$compare_replay_cache" ] || [ "$compare_quiet" = 1 ]; then
        start_keyauth keyauth-other "$bin/keyauth-server" "${other_flags[@]}"
    fi
fi
node_port=$(free_port)
PORT=$node_port ALG=$alg ISSUER=$issuer node "$node_server" >"$work/node-fair.log" 2>&1 &
node_pid=$!
pids+=("$node_pid")
port_by_server[node-fair]=$node_port
wait_healthy node-fair "$node_port"
servers+=(node-fair)
if [ "$floor" = 1 ]; then
    cc -O2 -o "$work/signature-floor" Benchmarks/load/signature-floor.c -lmicrohttpd -lcrypto
    floor_port=$(free_port)
    "$work/signature-floor" "$floor_port" "$alg" "${threads:-$cores}" >"$work/signature-floor.log" 2>&1 &
    pid_by_server[signature-floor]=$!
    pids+=("$!")
    port_by_server[signature-floor]=$floor_port
    wait_healthy signature-floor "$floor_port"
fi

port_of() { echo "${port_by_server[$1]}"; }
# pids_of SERVER: the server's processes (Node: the cluster's primary and its workers).
pids_of() {
    if [ "$1" = node-fair ]; then echo "$node_pid $(pgrep -P "$node_pid" | tr '\n' ' ')"; else echo "${pid_by_server[$1]}"; fi
}
urls=()
for server in "${servers[@]}"; do urls+=("http://127.0.0.1:$(port_of "$server")"); done

echo "== registering $devices RSA-2048 device keys with ${servers[*]}" >&2
"$bin/keyauth-bench" load-prepare --devices "$devices" --assertions 0 --keys-out "$work/keys" --out /dev/null \
    --issuer "$issuer" "${urls[@]}"
# The Node workers learn keys registered with another worker through the primary.
sleep 1

# Sample logins: a 200 with an access token signed with ALG, then the same assertion refused.
"$bin/keyauth-bench" load-prepare --keys-in "$work/keys" --assertions 3 --out "$work/samples.txt" --issuer "$issuer"
for server in "${servers[@]}"; do
    while read -r assertion; do
        answer=$(login_twice "http://127.0.0.1:$(port_of "$server")" "$assertion")
        statuses=$(tail -n 1 <<<"$answer")
        token_alg=$(head -n 1 <<<"$answer" | python3 -c '
import base64, json, sys
token = json.load(sys.stdin)["access_token"]
header = token.split(".")[0]
print(json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["alg"])' 2>/dev/null || echo none)
        if [ "$statuses" != "200 400" ] || [ "$token_alg" != "$alg" ]; then
            echo "run.sh: $server answered a sample assertion and its replay with $statuses (expected 200 400)," \
                "token alg $token_alg: $(head -n 1 <<<"$answer")" >&2
            exit 1
        fi
    done <"$work/samples.txt"
done
echo "== sample logins: 200 with an $alg access token, replay refused (400), on ${servers[*]}" >&2

ticks=$(getconf CLK_TCK)

# profile_of ROUND: where --profile keeps ROUND's recording: FILE for the first, FILE.N after.
profile_of() { if [ "$1" = 1 ]; then echo "$profile"; else echo "$profile.$1"; fi; }

# drive ROUND SERVER: one wrk run on the round's assertions; appends a line to $work/results.
drive() {
    local round=$1 server=$2 out="$work/$1-$2.txt" before after load perf_pid=""
    read -r -a server_pids <<<"$(pids_of "$server")"
    load=$(awk '{print $1}' /proc/loadavg)
    before=$(cpu_ticks "${server_pids[@]}")
    if [ -n "$profile" ] && [ "$server" = keyauth-server ]; then
        perf record -q -a -e cpu-clock -F "$profile_hz" -g -o "$(profile_of "$round")" -- sleep "$seconds" 2>/dev/null &
        perf_pid=$!
    fi
    wrk_login "http://127.0.0.1:$(port_of "$server")" "$work/assertions-$round.txt" "$seconds" "$connections" "$out"
    [ -z "$perf_pid" ] || wait "$perf_pid"
    after=$(cpu_ticks "${server_pids[@]}")
    local figures rate requests p50 p99
    figures=$(wrk_figures "$server, round $round" "$out")
    read -r rate requests p50 p99 <<<"$figures"
    echo "$round $server $rate $p50 $p99 $(peak_kib "${server_pids[@]}") \
$(awk -v t=$((after - before)) -v n="$requests" -v hz="$ticks" 'BEGIN {printf "%.6f", 1000 * t / hz / n}') $load" \
        >>"$work/results"
}

# The fastest plausible rate: RS256 logins cannot outrun RSA signing; ES256 ones are bound by
# the RS256 verification of the assertion and the HTTP work. Each wrk thread has half the
# assertions and the threads run unevenly (one at 14,500/s while the other idles): at 16,000 a
# server at 12,000 logins/s made one thread run out and replay (2026-12-03).
if [ "$alg" = RS256 ]; then
    per_second=$(awk -v c="$ceiling_before" 'BEGIN {printf "%d", c * 1.3 + 1000}')
else
    per_second=30000
fi
count=$((seconds * per_second))
: >"$work/results"
echo "== $alg logins: wrk -t2 -c$connections -d${seconds}s (keep-alive), $rounds rounds, $cores cores" >&2
for round in $(seq 1 "$rounds"); do
    echo "== round $round: signing $count unique assertions" >&2
    "$bin/keyauth-bench" load-prepare --keys-in "$work/keys" --assertions "$count" \
        --out "$work/assertions-$round.txt" --issuer "$issuer"
    order=("${servers[@]}")
    if [ $((round % 2)) = 0 ]; then
        order=()
        for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[$i]}"); done
    fi
    for server in "${order[@]}"; do drive "$round" "$server"; done
    [ "$floor" = 0 ] || drive "$round" signature-floor
    rm -f "$work/assertions-$round.txt"
done
ceiling_after=$(ceiling)

# transport SERVER PATH: requests/s of a plain GET, keep-alive; fails on any non-2xx answer.
transport_rate() {
    local out="$work/transport-$1.txt"
    wrk -t2 -c"$connections" -d"${seconds}s" --latency "http://127.0.0.1:$(port_of "$1")$2" >"$out"
    wrk_figures "$1 $2" "$out" | awk '{printf "%.0f", $1}'
}
if [ "$transport" = 1 ] && [ "$with_keyauth" = 1 ]; then
    echo "== transport: GET /.well-known/jwks.json (keyauth-server), GET /healthz (node-fair), $rounds rounds" >&2
    # As many rounds as the logins, alternating which goes first: one pair of runs moved by
    # 0.84x to 1.19x from one run of the script to the next (BENCHMARKS.md).
    transport_rounds=()
    for round in $(seq 1 "$rounds"); do
        if [ $((round % 2)) = 1 ]; then
            jwks_rate=$(transport_rate keyauth-server /.well-known/jwks.json)
            node_trivial_rate=$(transport_rate node-fair /healthz)
        else
            node_trivial_rate=$(transport_rate node-fair /healthz)
            jwks_rate=$(transport_rate keyauth-server /.well-known/jwks.json)
        fi
        transport_rounds+=("$jwks_rate $node_trivial_rate")
    done
    other_jwks_rate=""
    if [ -n "${pid_by_server[keyauth-other]:-}" ]; then
        other_jwks_rate=$(transport_rate keyauth-other /.well-known/jwks.json)
    fi
fi

echo
echo "$alg logins, wrk -t2 -c$connections -d${seconds}s, $rounds rounds, $cores cores ($(uname -m)), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "signing ceiling, openssl speed -multi $cores $ceiling_test: $ceiling_before sign/s before the runs," \
    "$ceiling_after after"
printf '%-5s %-15s %10s %9s %9s %10s %11s %6s\n' round server logins/s "p50 ms" "p99 ms" "peak MiB" "CPU ms/login" load
awk '{printf "%-5s %-15s %10.0f %9.2f %9.2f %10.1f %11.3f %6s\n", $1, $2, $3, $4, $5, $6 / 1024, $7, $8}' "$work/results"

python3 - "$work/results" "$alg" "$ceiling_before" "$ceiling_after" "${profile:+profiled}" <<'EOF'
import statistics, sys
path, alg, before, after = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
profiled = sys.argv[5] == "profiled"
runs = [line.split() for line in open(path)]
by_server = {}
for round_, server, rate, p50, p99, peak, cpu, load in runs:
    by_server.setdefault(server, []).append((int(round_), float(rate), float(p50), float(p99), int(peak), float(cpu)))
print()
print(f"{'server':15} {'logins/s median (min-max)':>28} {'p50 ms':>7} {'p99 ms (max)':>13} {'peak MiB':>9} {'CPU ms/login':>12}")
for server, rows in by_server.items():
    rates = [r[1] for r in rows]
    print(f"{server:15} {statistics.median(rates):>10.0f} ({min(rates):>7.0f}-{max(rates):>7.0f})"
          f" {statistics.median(r[2] for r in rows):>7.2f}"
          f" {statistics.median(r[3] for r in rows):>6.2f} ({max(r[3] for r in rows):>5.2f})"
          f" {max(r[4] for r in rows) / 1024:>9.1f} {statistics.median(r[5] for r in rows):>12.3f}")
keyauth, node = by_server.get("keyauth-server"), by_server.get("node-fair")
if not keyauth:
    sys.exit(0)
ceiling = max(before, after)
node_rates = {r[0]: r[1] for r in node}
ratios = [r[1] / node_rates[r[0]] for r in keyauth if r[0] in node_rates]
rate = statistics.median(r[1] for r in keyauth)
p99 = statistics.median(r[3] for r in keyauth)
peak = max(r[4] for r in keyauth) / 1024
target_node = 1.1 if alg == "RS256" else 1.5
checks = [
    (f"logins/s vs Node (median of per-round ratios {', '.join(f'{x:.2f}' for x in ratios)})",
     statistics.median(ratios), f">= {target_node}", statistics.median(ratios) >= target_node),
    ("p99 latency, ms (median of rounds)", p99, "< 10", p99 < 10),
    ("peak RSS, MiB", peak, "< 64", peak < 64),
]
if alg == "RS256":
    checks.insert(1, (f"logins/s vs signing ceiling ({ceiling:.0f} sign/s, the higher measurement)",
                      rate / ceiling, ">= 0.7", rate / ceiling >= 0.7))
print()
for name, value, target, met in checks:
    print(f"{name:78} {value:8.2f}  target {target:7}  {'met' if met else 'NOT met'}")
if profiled:
    print("keyauth-server ran under the profiler in every round, which may lower its rates"
          " (BENCHMARKS.md, \"Without the profiler\"): take them from a run without --profile")
floor = by_server.get("signature-floor")
if floor:
    floor_rates = {r[0]: r[1] for r in floor}
    shares = [r[1] / floor_rates[r[0]] for r in keyauth if r[0] in floor_rates]
    node_shares = [r[1] / floor_rates[r[0]] for r in node if r[0] in floor_rates]
    print(f"{'keyauth-server vs the signature floor, logins/s (median of per-round ratios)':78} "
          f"{statistics.median(shares):8.2f}  ({', '.join(f'{x:.2f}' for x in shares)})")
    print(f"{'node-fair vs the signature floor, logins/s (median of per-round ratios)':78} "
          f"{statistics.median(node_shares):8.2f}  ({', '.join(f'{x:.2f}' for x in node_shares)})")
    floor_p99 = statistics.median(r[3] for r in floor)
    print(f"{'the signature floor p99, ms (median of rounds; per round)':78} {floor_p99:8.2f}  "
          f"({', '.join(f'{r[3]:.2f}' for r in floor)})")
other = by_server.get("keyauth-other")
if other:
    other_rates = {r[0]: r[1] for r in other}
    changes = [r[1] / other_rates[r[0]] for r in keyauth if r[0] in other_rates]
    print(f"{'keyauth-server vs keyauth-other, logins/s (median of per-round ratios)':78} "
          f"{statistics.median(changes):8.2f}  ({', '.join(f'{x:.2f}' for x in changes)})")
EOF

if [ "$transport" = 1 ] && [ "$with_keyauth" = 1 ]; then
    echo
    printf '%s\n' "${transport_rounds[@]}" | python3 -c '
import statistics, sys
rounds = [tuple(map(float, line.split())) for line in sys.stdin if line.strip()]
ratios = [k / n for k, n in rounds]
for index, (k, n) in enumerate(rounds, 1):
    print(f"transport round {index}: keyauth-server GET /.well-known/jwks.json {k:.0f} requests/s,"
          f" node-fair GET /healthz {n:.0f} requests/s: {k / n:.2f}x")
ratio = statistics.median(ratios)
listed = ", ".join(f"{x:.2f}" for x in ratios)
verdict = "met" if ratio >= 1 else "NOT met"
print(f"transport: keyauth-server vs node-fair (median of per-round ratios {listed}) {ratio:.2f}x"
      f" (target >= 1.0, {verdict})")'
    if [ -n "$other_jwks_rate" ]; then
        awk -v k="$jwks_rate" -v o="$other_jwks_rate" 'BEGIN {
            printf "transport: keyauth-other GET /.well-known/jwks.json %d requests/s; keyauth-server %.2fx of it (one pair, after the rounds)\n", o, k / o }'
    fi
fi

if [ -n "$profile" ] && [ "$with_keyauth" = 1 ]; then
    # keyauth-other is a control for the profiler only when it is the same binary with the same
    # flags: then the two differ in nothing but the profiler.
    control=0
    if [ -n "$compare_server" ] && cmp -s "$compare_server" "$bin/keyauth-server" && [ -z "$replay_cache" ] \
        && [ -z "$compare_replay_cache" ] && [ "$compare_quiet" = 0 ]; then
        control=1
    fi
    # logins_in ROUND: the logins keyauth-server served while that round was recorded.
    logins_in() { awk '/requests in/ {print $1}' "$work/$1-keyauth-server.txt"; }
    for round in $(seq 1 "$rounds"); do
        perf script -i "$(profile_of "$round")" --pid "$keyauth_pid" 2>/dev/null >"$work/profile-$round.txt"
    done
    echo
    echo "where keyauth-server's CPU went in round 1 (perf record -a -g, $(logins_in 1) logins; $profile):"
    python3 Benchmarks/load/profile-summary.py "$(logins_in 1)" < "$work/profile-1.txt"
    echo
    python3 Benchmarks/load/profile-summary.py --steps "$(logins_in 1)" < "$work/profile-1.txt"
    # Every round was recorded: the target is a median of rounds, like the rates.
    for round in $(seq 1 "$rounds"); do
        python3 Benchmarks/load/profile-summary.py --outside "$(logins_in "$round")" < "$work/profile-$round.txt"
    done | python3 -c '
import statistics, sys
alg, results, control = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
rounds = [tuple(map(float, line.split())) for line in sys.stdin if line.strip()]
outside = [o for o, _ in rounds]
listed = ", ".join(f"{o:.1f} of {t:.1f}" for o, t in rounds)
def verdict(median):
    if alg != "ES256":
        return ""
    return " (target <= 60: " + ("met" if median <= 60 else "NOT met") + ")"
median = statistics.median(outside)
print()
print(f"CPU per login outside libcrypto, us (per round: {listed}): median {median:.1f}{verdict(median)}")
# With keyauth-other (unprofiled, in the same rounds), what the profiler cost each login is the
# difference of their measured CPU per login; taken off, the figure is that of a server unprofiled.
cpu = {}
for line in open(results):
    round_, server, *_, per_login, _load = line.split()
    cpu[(int(round_), server)] = float(per_login) * 1000
pairs = [(index, cpu.get((index, "keyauth-server")), cpu.get((index, "keyauth-other"))) for index in range(1, len(rounds) + 1)]
if control and all(profiled is not None and other is not None for _, profiled, other in pairs):
    costs = [profiled - other for _, profiled, other in pairs]
    corrected = [o - cost for o, cost in zip(outside, costs)]
    median = statistics.median(corrected)
    print("the profiler cost per login, us (keyauth-server profiled less keyauth-other unprofiled, per round: "
          + ", ".join(f"{cost:+.1f}" for cost in costs) + ")")
    print("CPU per login outside libcrypto less that cost, us (per round: "
          + ", ".join(f"{c:.1f}" for c in corrected) + f"): median {median:.1f}{verdict(median)}"
          + "; a lower bound, as the sampled figure above is an upper one: it assumes the"
          + " profiler cost nothing inside libcrypto")' "$alg" "$work/results" "$control"
fi
