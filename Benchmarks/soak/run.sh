#!/usr/bin/env bash
# Soak: keyauth-server under a mixed load for many minutes, checked for crashes, errors and growth.
#
#   bash Benchmarks/soak/run.sh [--alg RS256|ES256]... [--minutes N] [--connections N]
#                               [--pollers N] [--ciba-clients N] [--registrations-per-minute N]
#                               [--round-seconds N] [--signer-threads N] [--rss-tolerance PERCENT]
#                               [--max-wal-mib N] [--postgres URL] [--out DIR]
#
# For each --alg (default: RS256, then ES256; repeat the flag to choose), one run of --minutes
# (default 10) against a fresh keyauth-server:
#   1. builds keyauth-server and keyauth-bench in release mode (once);
#   2. starts keyauth-server on a new SQLite file with its production defaults (request log on
#      standard error, synchronous=FULL, two worker threads, metrics listener, 60 s cleanup),
#      except what one machine driving it from one address needs: open enrollment (loopback
#      only), no per-address connection cap and rate limits of 100,000 (every request comes
#      from 127.0.0.1); --token-alg ALG;
#   3. registers POLLERS + 16 RSA-2048 devices (`keyauth-bench load-prepare`) and a CIBA client;
#   4. drives, for the whole run and all at once:
#      - logins: rounds of ROUND seconds (default 30) of `wrk -t2 -cCONNECTIONS` (default 64)
#        with login.lua, each round on assertions that keyauth-bench signed during the round
#        before (`--seconds`, on SIGNER threads, default 1, so the server keeps the other core),
#        every one a new jti, paced to last the round: the login rate is what one core can sign,
#        and the peak rate is Benchmarks/load/run.sh's business;
#      - traffic.py: POLLERS devices (default 32) long-polling /v1/auth-requests?wait=30,
#        CIBA clients (default 6) whose /bc-authorize requests wake them and which poll for
#        the answer, device lifecycles (default 30 a minute: register, approve, log in, list,
#        revoke) and scrapes of /healthz, /metrics and the JWK set every 5 s;
#      - one signing key rotation (`keyauth-server keys rotate --delay 30`) a third of the way in;
#   5. samples the server's memory (VmRSS; anonymous, file and shared), open descriptors, threads,
#      CPU time, and the database and WAL file sizes every 5 s (samples.csv);
#   6. stops the traffic, waits 32 s for its last long polls to end, reads /metrics once more,
#      stops the server with SIGTERM, and checks (report.py): the server ran to the end and
#      stopped cleanly; no 5xx in its metrics or log;
#      every answer was the one the protocol prescribes and no socket error, timeout or spare
#      request (a round that ran out of assertions) occurred; RSS flat, the mean of the last
#      quarter of the samples within PERCENT (default 10) of the second quarter's; descriptors
#      flat, the last quarter's largest count at most the second quarter's plus 8; the SQLite
#      log (WAL) file at most MAX_WAL MiB (default 64); tokens signed by the rotated key when the
#      rotation came 2 minutes or more before the end.
# It prints per run the login rounds (logins/s, p50/p99 latency), the traffic by kind, RSS
# start/mid/end/peak and the errors, keeps the files in --out (default /tmp/keyauth-soak-TIME;
# the server's full log only after a crash, a 5xx or an error line), and exits 1 when any check
# failed.
#
# --postgres URL runs the server on PostgreSQL instead (its deployment for several instances, with
# the replay cache in the database): each run creates a schema of its own in the database URL
# names (.ci/postgres.sh prints such a URL as KEYAUTH_TEST_POSTGRES_URL), serves from it through
# the URL's search_path, and drops it at the end. The samples' db_kib column is then the size of
# the schema's tables with their indexes and wal_kib stays 0; the server's checks are the same.
set -euo pipefail
[ -n "${KEYAUTH_BENCH_DEBUG:-}" ] && set -x
cd "$(dirname "$0")/../.."

algs=()
minutes=10
connections=64
pollers=32
ciba_clients=6
registrations=30
round_seconds=30
signer_threads=1
rss_tolerance=10
max_wal=64
postgres=""
out=/tmp/keyauth-soak-$(date -u +%Y%m%dT%H%M%SZ)
usage() {
    sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 64
}
while [ $# -gt 0 ]; do
    case $1 in
    --alg) algs+=("${2:?}"); shift 2 ;;
    --minutes) minutes=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    --pollers) pollers=${2:?}; shift 2 ;;
    --ciba-clients) ciba_clients=${2:?}; shift 2 ;;
    --registrations-per-minute) registrations=${2:?}; shift 2 ;;
    --round-seconds) round_seconds=${2:?}; shift 2 ;;
    --signer-threads) signer_threads=${2:?}; shift 2 ;;
    --rss-tolerance) rss_tolerance=${2:?}; shift 2 ;;
    --max-wal-mib) max_wal=${2:?}; shift 2 ;;
    --postgres) postgres=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "soak: unknown argument $1" >&2; usage ;;
    esac
done
[ ${#algs[@]} -gt 0 ] || algs=(RS256 ES256)
for alg in "${algs[@]}"; do
    case $alg in RS256 | ES256) ;; *) echo "soak: --alg takes RS256 or ES256, not $alg" >&2; exit 64 ;; esac
done
# A round's assertions are signed during the round before and live two rounds and 10 s.
if [ "$round_seconds" -lt 10 ] || [ "$round_seconds" -gt 120 ]; then
    echo "soak: --round-seconds must be 10 to 120" >&2
    exit 64
fi
[ -z "$postgres" ] || command -v psql >/dev/null || { echo "soak: --postgres needs psql" >&2; exit 69; }
for tool in wrk openssl curl /usr/bin/python3; do
    command -v "$tool" >/dev/null || { echo "soak: $tool is not installed" >&2; exit 69; }
done
/usr/bin/python3 -c 'import jwt, cryptography' 2>/dev/null ||
    { echo "soak: /usr/bin/python3 needs PyJWT and cryptography (python3-jwt, python3-cryptography)" >&2; exit 69; }

swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth-bench >&2
bin=$(swift build -c release --show-bin-path)
mkdir -p "$out"
devices=$((pollers + 16))
issuer="http://keyauth.soak"

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# sample PID DIR START: one line every 5 s while PID lives: its memory (RSS, and of it the heap
# and other anonymous memory, mapped files, shared memory such as SQLite's -shm index), peak,
# descriptors, threads, CPU ticks, the machine's load, and the database and log file sizes.
sample() {
    local pid=$1 file=$2/samples.csv start=$3 db=$4
    echo "seconds,rss_kib,anon_kib,file_kib,shmem_kib,hwm_kib,fds,threads,cpu_ticks,load1,db_kib,wal_kib" >"$file"
    while [ -d "/proc/$pid" ]; do
        {
            local memory fds ticks sizes
            memory=$(awk '/^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM|Threads):/ {m[$1] = $2}
                END {print m["VmRSS:"] "," m["RssAnon:"] "," m["RssFile:"] "," m["RssShmem:"] "," m["VmHWM:"] \
                    "," m["Threads:"]}' "/proc/$pid/status")
            fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
            ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
            if [ -n "$postgres" ]; then
                sizes="$(psql -tAc "SELECT (coalesce(sum(pg_total_relation_size(c.oid)), 0) / 1024)::bigint FROM pg_class c
                    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '$5' AND c.relkind = 'r'" \
                    "$postgres"),0"
            else
                sizes=$(for f in "$db" "$db-wal"; do stat -c %s "$f" 2>/dev/null || echo 0; done |
                    awk '{printf "%s%d", (NR > 1 ? "," : ""), $1 / 1024}')
            fi
            echo "$(($(date +%s) - start)),${memory%,*},$fds,${memory##*,},$ticks,$(cut -d' ' -f1 /proc/loadavg),$sizes" \
                >>"$file"
        } 2>/dev/null || true
        sleep 5
    done
}

# soak ALG: one run; appends its verdict to $out/verdicts.
soak() {
    local alg=$1 dir="$out/$1" port metrics_port server_pid db schema=""
    mkdir -p "$dir"
    rm -f "$dir"/*.db*
    db="$dir/keyauth.db"
    if [ -n "$postgres" ]; then
        schema="keyauth_soak_$(tr '[:upper:]' '[:lower:]' <<<"$alg")_$$"
        psql -q -c "DROP SCHEMA IF EXISTS $schema CASCADE" -c "CREATE SCHEMA $schema" "$postgres" >&2
        db="$postgres$([[ $postgres == *\?* ]] && echo '&' || echo '?')options=-csearch_path%3D$schema"
    fi
    port=$(free_port)
    metrics_port=$(free_port)
    "$bin/keyauth-server" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port" \
        --db "$db" --issuer "$issuer" --token-alg "$alg" --enrollment open \
        --rate-limit 100000 --registration-limit 100000 --max-connections-per-address 0 2>"$dir/server.log" &
    server_pid=$!
    pids+=("$server_pid")
    echo "$server_pid" >"$dir/server.pid"
    for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
    curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" ||
        { echo "soak: keyauth-server did not start: $(tail -n 5 "$dir/server.log")" >&2; exit 1; }

    echo "== $alg: registering $devices RSA-2048 devices and a CIBA client" >&2
    "$bin/keyauth-bench" load-prepare --devices "$devices" --assertions 0 --keys-out "$dir/keys.pem" \
        --out /dev/null --issuer "$issuer" "http://127.0.0.1:$port"
    local credentials client_id client_secret
    credentials=$("$bin/keyauth-server" clients add "soak client" --db "$db" 2>"$dir/clients.err") ||
        { echo "soak: keyauth-server clients add failed: $(cat "$dir/clients.err")" >&2; exit 1; }
    client_id=$(sed -n 's/^client_id=//p' <<<"$credentials")
    client_secret=$(sed -n 's/^client_secret=//p' <<<"$credentials")

    # An assertion is sent at most two rounds after it was signed; a lifetime a little longer
    # (not the 300 s maximum) keeps the server's replay cache at what real clients (30 s) leave
    # in it, so that its size levels off early in the run instead of growing for five minutes.
    local seconds=$((minutes * 60)) rounds budget=$((round_seconds - 3)) lifetime=$((2 * round_seconds + 10))
    rounds=$(((seconds + round_seconds - 1) / round_seconds))
    echo "== $alg: signing the first round's assertions ($budget s on $signer_threads threads)" >&2
    sign_round() {
        "$bin/keyauth-bench" load-prepare --keys-in "$dir/keys.pem" --assertions 10000000 --seconds "$budget" \
            --threads "$signer_threads" --lifetime "$lifetime" --out "$dir/assertions-$1.txt" --issuer "$issuer"
    }
    sign_round 1

    local start
    start=$(date +%s)
    echo "$start" >"$dir/start"
    sample "$server_pid" "$dir" "$start" "$db" "$schema" &
    local sampler_pid=$!
    pids+=("$sampler_pid")
    /usr/bin/python3 Benchmarks/soak/traffic.py --port "$port" --metrics-port "$metrics_port" --issuer "$issuer" \
        --alg "$alg" --keys "$dir/keys.pem" --client-id="$client_id" --client-secret="$client_secret" \
        --seconds "$seconds" --pollers "$pollers" --ciba-clients "$ciba_clients" \
        --registrations-per-minute "$registrations" --summary "$dir/traffic.json" --csv "$dir/traffic.csv" \
        2>"$dir/traffic.err" &
    local traffic_pid=$!
    pids+=("$traffic_pid")

    echo "== $alg: $minutes minutes, $rounds login rounds of ${round_seconds}s (wrk -t2 -c$connections)" \
        "beside traffic.py; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    local round signer_pid count pause rotate_round=$((rounds / 3 + 1))
    : >"$dir/rounds"
    for round in $(seq 1 "$rounds"); do
        signer_pid=""
        if [ "$round" -lt "$rounds" ]; then
            sign_round $((round + 1)) &
            signer_pid=$!
        fi
        if [ "$round" = "$rotate_round" ]; then
            echo "$(($(date +%s) - start)) $("$bin/keyauth-server" keys rotate --delay 30 --db "$db" \
                2>>"$dir/rotate.err")" >"$dir/rotation"
        fi
        count=$(wc -l <"$dir/assertions-$round.txt")
        # A tenth longer than the round: the answers' own time no longer makes up for the
        # random pauses' spread, and a connection that runs out sends spare requests.
        pause=$((connections * round_seconds * 1100 / (count > 0 ? count : 1)))
        echo "$round $(($(date +%s) - start)) $count $(cut -d' ' -f1 /proc/loadavg)" >>"$dir/rounds"
        KEYAUTH_ASSERTIONS="$dir/assertions-$round.txt" KEYAUTH_THREADS=2 KEYAUTH_PAUSE_MS=$pause \
            wrk -t2 -c"$connections" -d"${round_seconds}s" --timeout 10s --latency -s Benchmarks/soak/login.lua \
            "http://127.0.0.1:$port" >"$dir/wrk-$round.txt" 2>&1 || true
        rm -f "$dir/assertions-$round.txt"
        [ -z "$signer_pid" ] || wait "$signer_pid" || echo "soak: signing round $((round + 1)) failed" >&2
        if ! kill -0 "$server_pid" 2>/dev/null; then
            echo "soak: keyauth-server is gone after login round $round" >&2
            break
        fi
        printf '%s' "$(awk -v r="$round" '/Requests\/sec/ {printf "  round %s: %s logins/s", r, $2}' \
            "$dir/wrk-$round.txt")" >&2
        echo " (${count} signed, load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
    rm -f "$dir"/assertions-*.txt

    kill -TERM "$traffic_pid" 2>/dev/null || true
    wait "$traffic_pid" || echo "soak: traffic.py exited with $?" >&2
    # traffic.py hangs up on its long polls, which the server does not see while it holds them
    # (the connection is suspended): they end at their 30 s wait, or with the stop's 503, which
    # would count as a 5xx. So the stop comes after the last of them has ended.
    # The memory and descriptor checks look at the load only, not this wait (load-end).
    echo "$(($(date +%s) - start))" >"$dir/load-end"
    [ "$pollers" -eq 0 ] || sleep 32
    curl -fs "http://127.0.0.1:$metrics_port/metrics" >"$dir/metrics.txt" || true
    "$bin/keyauth-server" keys list --db "$db" >"$dir/keys.txt" 2>&1 || true
    local alive=1 status=0
    kill -0 "$server_pid" 2>/dev/null || alive=0
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" || status=$?
    wait "$sampler_pid" 2>/dev/null || true
    echo "$alive $status" >"$dir/server-exit"
    rm -f "$dir"/keyauth.db* "$dir/keys.pem"
    [ -z "$schema" ] || psql -q -c "DROP SCHEMA IF EXISTS $schema CASCADE" "$postgres" >&2 || true

    local verdict=0
    /usr/bin/python3 Benchmarks/soak/report.py "$dir" --alg "$alg" --minutes "$minutes" \
        --connections "$connections" --rounds "$rounds" --rss-tolerance "$rss_tolerance" \
        --max-wal-mib "$max_wal" | tee "$dir/summary.txt" || verdict=1
    # The full request log only when it is evidence (report.py says so: a crash, 5xx, errors).
    if [ ! -e "$dir/keep-log" ]; then
        tail -n 200 "$dir/server.log" >"$dir/server-log-tail.txt"
        rm -f "$dir/server.log"
    fi
    echo "$alg $verdict" >>"$out/verdicts"
}

: >"$out/verdicts"
for alg in "${algs[@]}"; do soak "$alg"; done
echo
echo "soak: $(awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, ($2 == 0 ? "passed" : "FAILED")}' "$out/verdicts");" \
    "files in $out"
! grep -q ' 1$' "$out/verdicts"
