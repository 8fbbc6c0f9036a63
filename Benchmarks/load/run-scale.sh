#!/usr/bin/env bash
# Logins at scale: keyauth-server with 200 registered devices against the same server with
# DEVICES registered devices, under the same load, in one run.
#
#   bash Benchmarks/load/run-scale.sh [--backend sqlite|postgres] [--devices N] [--seconds N]
#                                     [--rounds N] [--connections N] [--threads N]
#                                     [--ceiling-seconds N] [--per-second N]
#
# One invocation:
#   1. builds keyauth-server and keyauth-bench in release mode, or takes them from the directory
#      KEYAUTH_BENCH_BIN (Benchmarks/release-bin.sh);
#   2. starts two servers, "base" and "scale", each on a database of its own: SQLite files in a
#      temporary directory, or (--backend postgres, run as root) two fresh schemas in the
#      loopback cluster of .ci/postgres.sh, dropped at the end;
#   3. registers the same 200 RSA-2048 device keys with both (`keyauth-bench load-prepare`);
#   4. stops both, writes DEVICES - 200 filler devices straight into the scale database
#      (scale-filler.py: realistic rows with kids no real key has; SQLite through python3's
#      sqlite3, PostgreSQL with COPY, then VACUUM ANALYZE), timed, and measures the database
#      size per device;
#   5. starts both again (fresh processes, so that peak memory covers the logins only), checks
#      the device counts and that each answers a sample login and refuses its replay;
#   6. measures the machine's signing ceiling (`openssl speed -multi $(nproc) rsa2048`), which
#      bounds the login rate (every login signs an RS256 access token); for each of ROUNDS
#      rounds, signs SECONDS x PER_SECOND unique assertions for the 200 keys (PER_SECOND:
#      2 x ceiling + 1000 unless given, twice the bound, since a ceiling measured while other
#      programs run comes out low) and drives each server with `wrk -t2 -cCONNECTIONS` (keep-alive, the same assertions for
#      both) for SECONDS, alternating which goes first; any non-2xx answer or socket error
#      fails the benchmark;
#   7. prints per run logins/s, p50/p99 latency, peak RSS (VmHWM), CPU per login (and, on
#      PostgreSQL, the CPU of all postgres processes per login), then per database the median
#      and spread of the rounds, the ratio scale/base against the target (within 10%: 0.90 or
#      more), the scale server's peak RSS against 128 MiB, the database size per device and
#      how long the filler insert took.
#
# Defaults: --backend sqlite, --devices 1000000 (100000 with postgres), --seconds 10, --rounds 3,
# --connections 32, --ceiling-seconds 3 (how long each core signs for the ceiling). --threads N
# passes --threads to both servers. --per-second N signs N assertions per second of a run. Every
# login comes from one of the 200 real devices, whose rows lie scattered among the filler rows
# (random kids); the filler devices only take space in the tables and indexes.
set -euo pipefail
[ -n "${KEYAUTH_BENCH_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/../.."
# shellcheck source=Benchmarks/load/common.sh
source Benchmarks/load/common.sh

backend=sqlite
devices=""
seconds=10
rounds=3
connections=32
threads=""
ceiling_seconds=3
per_second=""
real=200
usage() {
    sed -n '5,7p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}
while [ $# -gt 0 ]; do
    case $1 in
    --backend) backend=${2:?}; shift 2 ;;
    --devices) devices=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --ceiling-seconds) ceiling_seconds=${2:?}; shift 2 ;;
    --per-second) per_second=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "run-scale.sh: unknown argument $1" >&2; usage ;;
    esac
done
case $backend in
sqlite) devices=${devices:-1000000} ;;
postgres) devices=${devices:-100000} ;;
*) echo "run-scale.sh: --backend takes sqlite or postgres, not $backend" >&2; exit 64 ;;
esac
for value in "$devices" "$seconds" "$rounds" "$connections" "$ceiling_seconds" ${threads:+"$threads"} \
    ${per_second:+"$per_second"}; do
    [[ $value =~ ^[1-9][0-9]*$ ]] || { echo "run-scale.sh: $value is not a positive number" >&2; exit 64; }
done
if [ "$devices" -le "$real" ]; then
    echo "run-scale.sh: --devices must be more than the $real real devices" >&2
    exit 64
fi
for tool in wrk curl openssl python3; do
    command -v "$tool" >/dev/null || { echo "run-scale.sh: $tool is not installed" >&2; exit 69; }
done

release_products="keyauth-server keyauth-bench"
# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh
for product in keyauth-server keyauth-bench; do
    [ -x "$bin/$product" ] || { echo "run-scale.sh: no $bin/$product" >&2; exit 66; }
done
server_flags=()
[ -z "$threads" ] || server_flags+=(--threads "$threads")

work=$(mktemp -d /tmp/keyauth-scale.XXXXXX)
declare -A pid_by_server port_by_server db_by_server
schemas=()
cleanup() {
    local name
    for name in "${!pid_by_server[@]}"; do kill "${pid_by_server[$name]}" 2>/dev/null || true; done
    for name in "${!pid_by_server[@]}"; do wait "${pid_by_server[$name]}" 2>/dev/null || true; done
    for s in "${schemas[@]}"; do
        psql -X -q "$base_url" -c "DROP SCHEMA IF EXISTS $s CASCADE" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

if [ "$backend" = postgres ]; then
    eval "$(bash .ci/postgres.sh)"
    base_url=$KEYAUTH_TEST_POSTGRES_URL
    suffix=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
    for name in base scale; do
        schemas+=("keyauth_scale_${suffix}_$name")
        psql -X -q -v ON_ERROR_STOP=1 "$base_url" -c "CREATE SCHEMA keyauth_scale_${suffix}_$name" >/dev/null
        db_by_server[$name]="$base_url?options=-csearch_path%3Dkeyauth_scale_${suffix}_$name&application_name=$name"
    done
    # sql NAME STATEMENT: one value (or row, |-separated) from the server's schema.
    sql() { psql -X -q -A -t -v ON_ERROR_STOP=1 "${db_by_server[$1]}" -c "$2"; }
else
    for name in base scale; do db_by_server[$name]=$work/$name.db; done
fi

# One issuer for both servers, so that one set of assertions serves both.
issuer="http://keyauth.bench"
# start_server NAME: a keyauth-server on the database NAME; waits until it is healthy.
start_server() {
    local name=$1 port
    port=$(free_port)
    "$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "${db_by_server[$name]}" --issuer "$issuer" \
        "${bench_server_flags[@]}" "${server_flags[@]}" 2>>"$work/$name.log" &
    pid_by_server[$name]=$!
    port_by_server[$name]=$port
    wait_healthy "$name" "$port"
}
# stop_server NAME: SIGTERM, and waits for the clean stop (a SQLite server with its replay cache
# in memory saves it and releases its lock on the file).
stop_server() {
    kill "${pid_by_server[$1]}"
    wait "${pid_by_server[$1]}" || { echo "run-scale.sh: $1 did not stop cleanly: $(cat "$work/$1.log")" >&2; exit 1; }
    unset "pid_by_server[$1]"
}
url_of() { echo "http://127.0.0.1:${port_by_server[$1]}"; }

start_server base
start_server scale
echo "== registering $real RSA-2048 device keys with both servers ($backend)" >&2
"$bin/keyauth-bench" load-prepare --devices "$real" --assertions 0 --keys-out "$work/keys" --out /dev/null \
    --issuer "$issuer" "$(url_of base)" "$(url_of scale)"
stop_server base
stop_server scale

filler=$((devices - real))
echo "== writing $filler filler devices into the scale database" >&2
started=$EPOCHREALTIME
if [ "$backend" = sqlite ]; then
    python3 Benchmarks/load/scale-filler.py sqlite "${db_by_server[scale]}" "$filler"
    fill_seconds=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
    fill_note=""
    size() { python3 Benchmarks/load/scale-filler.py size "${db_by_server[$1]}"; }
    size_note="SQLite file with its WAL after a checkpoint"
else
    columns=$(python3 Benchmarks/load/scale-filler.py columns)
    found=$(sql scale "SELECT column_name FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'devices'" | LC_ALL=C sort | paste -sd,)
    if [ "$found" != "$(tr ',' '\n' <<<"$columns" | LC_ALL=C sort | paste -sd,)" ]; then
        echo "run-scale.sh: devices has the columns $found; scale-filler.py writes $columns: give it the new ones" >&2
        exit 1
    fi
    python3 Benchmarks/load/scale-filler.py copy "$filler" |
        psql -X -q -v ON_ERROR_STOP=1 "${db_by_server[scale]}" -c "COPY devices ($columns) FROM STDIN"
    fill_seconds=$(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
    # What autovacuum would do soon after: the visibility map and planner statistics of the
    # grown table, so that the logins meet the table as it is in service.
    started=$EPOCHREALTIME
    for name in base scale; do sql "$name" "VACUUM ANALYZE devices" >/dev/null; done
    fill_note=" (then VACUUM ANALYZE: $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}') s)"
    # All the schema's tables with their indexes and TOAST, the devices table alone, its rows.
    size() {
        sql "$1" "SELECT (SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'),
            pg_total_relation_size('devices'), (SELECT COUNT(*) FROM devices)" | tr '|' ' '
    }
    size_note="PostgreSQL tables of the schema with indexes and TOAST"
fi
# size NAME prints the database's bytes, the devices table's and the number of devices.
sizes=$(size base)
read -r base_bytes _ base_count <<<"$sizes"
sizes=$(size scale)
read -r scale_bytes table_bytes scale_count <<<"$sizes"
if [ "$base_count" != "$real" ] || [ "$scale_count" != "$devices" ]; then
    echo "run-scale.sh: the databases hold $base_count and $scale_count devices, not $real and $devices" >&2
    exit 1
fi

start_server base
start_server scale
# Sample logins: a 200 with an access token, then the same assertion refused, on both.
"$bin/keyauth-bench" load-prepare --keys-in "$work/keys" --assertions 2 --out "$work/samples.txt" --issuer "$issuer"
for name in base scale; do
    while read -r assertion; do
        statuses=$(login_twice "$(url_of "$name")" "$assertion" | tail -n 1)
        if [ "$statuses" != "200 400" ]; then
            echo "run-scale.sh: the $name server answered a sample assertion and its replay with $statuses" \
                "(expected 200 400)" >&2
            exit 1
        fi
    done <"$work/samples.txt"
done
echo "== sample logins: 200, replay refused (400), with $real and $devices devices" >&2

ticks=$(getconf CLK_TCK)
database_ticks() {
    [ "$backend" = postgres ] || { echo 0; return; }
    local ids
    mapfile -t ids < <(pgrep -x postgres || true)
    cpu_ticks "${ids[@]}"
}
# drive ROUND NAME: one wrk run on the round's assertions; appends a line to $work/results.
drive() {
    local round=$1 name=$2 out="$work/$1-$2.txt" pid=${pid_by_server[$2]} load before db_before
    local after db_after figures rate requests p50 p99
    load=$(awk '{print $1}' /proc/loadavg)
    before=$(cpu_ticks "$pid")
    db_before=$(database_ticks)
    wrk_login "$(url_of "$name")" "$work/assertions-$round.txt" "$seconds" "$connections" "$out"
    after=$(cpu_ticks "$pid")
    db_after=$(database_ticks)
    requests=$(awk '/requests in/ {print $1}' "$out")
    if [ "$requests" -gt "$count" ]; then
        echo "run-scale.sh: $name, round $round: $requests requests for $count assertions (replays refused);" \
            "pass a higher --per-second than $per_second" >&2
        exit 1
    fi
    figures=$(wrk_figures "$name, round $round" "$out")
    read -r rate requests p50 p99 <<<"$figures"
    echo "$round $name $rate $p50 $p99 $(peak_kib "$pid") $(awk -v t=$((after - before)) \
        -v d=$((db_after - db_before)) -v n="$requests" -v hz="$ticks" \
        'BEGIN {printf "%.3f %.3f", 1000 * t / hz / n, 1000 * d / hz / n}') $load" >>"$work/results"
}

: >"$work/results"
cores=$(nproc)
echo "== signing ceiling: openssl speed -multi $cores -seconds $ceiling_seconds rsa2048" >&2
ceiling=$(signing_ceiling rsa2048 "$ceiling_seconds")
# The fastest plausible rate: RS256 logins cannot outrun RSA signing. A fixed count rather than
# signing for a time: how fast the signing goes says nothing of how fast the logins will.
per_second=${per_second:-$(awk -v c="$ceiling" 'BEGIN {printf "%d", 2 * c + 1000}')}
count=$((seconds * per_second))
echo "== RS256 logins: wrk -t2 -c$connections -d${seconds}s (keep-alive), $rounds rounds, $cores cores" >&2
for round in $(seq 1 "$rounds"); do
    echo "== round $round: signing $count unique assertions" >&2
    "$bin/keyauth-bench" load-prepare --keys-in "$work/keys" --assertions "$count" \
        --out "$work/assertions-$round.txt" --issuer "$issuer"
    order=(base scale)
    [ $((round % 2)) = 1 ] || order=(scale base)
    for name in "${order[@]}"; do drive "$round" "$name"; done
    rm -f "$work/assertions-$round.txt"
done

echo
echo "RS256 logins at scale, $backend: $real vs $devices registered devices, wrk -t2 -c$connections" \
    "-d${seconds}s, $rounds rounds, $cores cores ($(uname -m)), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "signing ceiling, openssl speed -multi $cores rsa2048: $ceiling sign/s before the runs"
printf '%-5s %-9s %10s %9s %9s %9s %12s %11s %6s\n' round devices logins/s "p50 ms" "p99 ms" "peak MiB" \
    "CPU ms/login" "db ms/login" load
awk -v base="$real" -v scale="$devices" '{printf "%-5s %-9s %10.0f %9.2f %9.2f %9.1f %12.3f %11s %6s\n",
    $1, ($2 == "base" ? base : scale), $3, $4, $5, $6 / 1024, $7, ($8 + 0 ? $8 : "-"), $9}' "$work/results"

python3 - "$work/results" "$real" "$devices" "$base_bytes" "$scale_bytes" "$table_bytes" "$size_note" \
    "$filler" "$fill_seconds" "$fill_note" <<'EOF'
import statistics, sys
path, real, devices = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base_bytes, scale_bytes, table_bytes = (int(x) for x in sys.argv[4:7])
size_note, filler, fill_seconds, fill_note = sys.argv[7], int(sys.argv[8]), float(sys.argv[9]), sys.argv[10]
by_server = {}
for line in open(path):
    round_, name, rate, p50, p99, peak, cpu, db, load = line.split()
    by_server.setdefault(name, {})[int(round_)] = (
        float(rate), float(p50), float(p99), int(peak), float(cpu), float(db))
print()
print(f"{'devices':>9} {'logins/s median (min-max)':>28} {'p50 ms':>7} {'p99 ms (max)':>13} {'peak MiB':>9}"
      f" {'CPU ms/login':>12} {'db ms/login':>11}")
for name, count in (("base", real), ("scale", devices)):
    rows = list(by_server[name].values())
    rates = [r[0] for r in rows]
    db = statistics.median(r[5] for r in rows)
    print(f"{count:>9} {statistics.median(rates):>10.0f} ({min(rates):>7.0f}-{max(rates):>7.0f})"
          f" {statistics.median(r[1] for r in rows):>7.2f}"
          f" {statistics.median(r[2] for r in rows):>6.2f} ({max(r[2] for r in rows):>5.2f})"
          f" {max(r[3] for r in rows) / 1024:>9.1f} {statistics.median(r[4] for r in rows):>12.3f}"
          f" {f'{db:.3f}' if db else '-':>11}")
base, scale = by_server["base"], by_server["scale"]
ratios = [scale[r][0] / base[r][0] for r in sorted(scale) if r in base]
ratio = statistics.median(ratios)
peak = max(r[3] for r in scale.values()) / 1024
print()
for label, value, target, met in (
    (f"logins/s with {devices} devices vs {real} (median of per-round ratios "
     f"{', '.join(f'{x:.2f}' for x in ratios)})", ratio, ">= 0.90", ratio >= 0.9),
    (f"peak RSS with {devices} devices, MiB", peak, "< 128", peak < 128),
):
    print(f"{label:78} {value:8.2f}  target {target:7}  {'met' if met else 'NOT met'}")
mib = 1024 * 1024
print(f"database size with {devices} devices: {scale_bytes / mib:.1f} MiB, {scale_bytes / devices:.0f} bytes per"
      f" device ({size_note})")
print(f"  with {real} devices {base_bytes / mib:.1f} MiB, so {(scale_bytes - base_bytes) / (devices - real):.0f} bytes"
      f" per added device; the devices table with its indexes {table_bytes / devices:.0f} bytes per device")
print(f"filler insert: {filler} devices in {fill_seconds:.1f} s,"
      f" {filler / max(fill_seconds, 0.001):.0f} devices/s{fill_note}")
EOF
