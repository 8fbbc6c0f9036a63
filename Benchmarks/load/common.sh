# shellcheck shell=bash
# Sourced by the login benchmarks of this folder (run.sh, run-scale.sh): how they start a
# keyauth-server, check it, drive it with wrk and read what a process used, written once so that
# their figures are measured the same way. wait_healthy reads $work/NAME.log: the caller sets
# `work` (its temporary directory) first.

# The flags every benchmark server gets. Open enrollment (loopback only): the benchmark registers
# first devices without codes. All load comes from one address by design: no per-address limits.
# No metrics listener: the port after the free one found by free_port may be taken. A log line
# for every request, as in production (the scripts send it to a file in their work directory).
# shellcheck disable=SC2034 # read by the scripts that source this file
bench_server_flags=(--enrollment open --rate-limit 100000 --registration-limit 100000
    --max-connections-per-address 0 --metrics-listen off)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_healthy NAME PORT: waits up to 10 s for /healthz, else exits with the server's log.
wait_healthy() {
    local name=$1 port=$2
    for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && return 0; sleep 0.1; done
    # shellcheck disable=SC2154 # work is the caller's
    echo "${0##*/}: $name did not start: $(cat "$work/$name.log" 2>/dev/null)" >&2
    exit 1
}

# signing_ceiling TEST SECONDS: signatures per second of all cores together, from `openssl speed
# -multi $(nproc)` for TEST (rsa2048 or ecdsap256), each core signing for SECONDS.
signing_ceiling() {
    openssl speed -multi "$(nproc)" -seconds "$2" "$1" 2>/dev/null | awk -v t="$1" '
        t == "rsa2048" && $1 == "rsa" && $2 == "2048" {print $6}
        t == "ecdsap256" && $3 == "ecdsa" && $4 == "(nistp256)" {print $7}'
}

# login_twice URL ASSERTION: posts the assertion twice on one keep-alive connection to URL (a
# Node server's replay map is per worker, and a connection stays with its worker); prints the
# first answer's body, then both statuses on one line.
login_twice() {
    local url="$1/oauth/token" form
    form="grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=$2"
    curl -s -H 'Content-Type: application/x-www-form-urlencoded' -w '\n%{http_code}\n' \
        --data "$form" "$url" --next -H 'Content-Type: application/x-www-form-urlencoded' \
        -w '\n%{http_code}\n' -o /dev/null --data "$form" "$url" |
        awk 'NR == 1 {print} NR > 1 && $0 != "" {s = s (s ? " " : "") $0} END {print s}'
}

# cpu_ticks PID...: user and system clock ticks the processes used so far (those gone count 0).
cpu_ticks() {
    local total=0 pid
    for pid in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done
    echo "$total"
}

# peak_kib PID...: the sum of the processes' peak resident memory (VmHWM), KiB.
peak_kib() {
    local total=0 pid
    for pid in "$@"; do total=$((total + $(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0))); done
    echo "$total"
}

# to_ms VALUE: wrk's 512.00us, 6.31ms or 1.02s in milliseconds.
to_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) printf "%.3f", v / 1000; else if (v ~ /ms$/) printf "%.3f", v + 0;
        else if (v ~ /s$/) printf "%.3f", v * 1000; else printf "%.3f", v }'
}

# wrk_login URL ASSERTIONS SECONDS CONNECTIONS OUT: POST /oauth/token for SECONDS with
# `wrk -t2` (keep-alive), every request with the next unused line of the file ASSERTIONS
# (login.lua); wrk's report goes to OUT.
wrk_login() {
    KEYAUTH_ASSERTIONS="$2" KEYAUTH_THREADS=2 \
        wrk -t2 -c"$4" -d"$3s" --latency -s Benchmarks/load/login.lua "$1" >"$5"
}

# wrk_figures LABEL OUT: "logins/s requests p50-ms p99-ms" of the wrk report OUT; a run with any
# non-2xx answer or socket error prints the report and exits (inside $(...), set -e ends the
# caller).
wrk_figures() {
    local label=$1 out=$2 non2xx errors
    non2xx=$(awk '/Non-2xx/ {n = $5} END {print n + 0}' "$out")
    errors=$(awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$out")
    if [ "$non2xx" != 0 ] || [ "${errors:-0}" != 0 ]; then
        echo "${0##*/}: $label: $non2xx non-2xx answers, ${errors:-0} socket errors" >&2
        cat "$out" >&2
        exit 1
    fi
    echo "$(awk '/Requests\/sec/ {print $2}' "$out") $(awk '/requests in/ {print $1}' "$out")" \
        "$(to_ms "$(awk '$1 == "50%" {print $2}' "$out")") $(to_ms "$(awk '$1 == "99%" {print $2}' "$out")")"
}
