#!/usr/bin/env bash
# Exact counts of what one login does inside keyauth-server, HTTP aside: calls to malloc,
# swift_retain and swift_release made under the responder while `keyauth-bench login-path` logs
# in (no sockets; LoginPathBenchmark.swift). Unlike times, counts do not depend on how busy the
# machine is, so two builds can be compared on a noisy machine.
#
#   sudo bash Benchmarks/load/count-login-path.sh [--alg RS256|ES256] [--logins N] [--log text|json]
#                                                 [--compare-bench PATH]
#
# --log FORMAT has every login write its log line, as `serve` does by default, to /dev/null (both
# binaries must know `login-path --log`); without it no line is made, as with `serve --quiet`.
# --compare-bench PATH counts another keyauth-bench binary too (an older build copied aside), in
# the same way; a build older than `login-path --alg` logs in with RS256 tokens whatever --alg
# says, so compare such a build with RS256. Needs root and perf: it places uprobes on libc's malloc and on the Swift
# runtime's swift_retain and swift_release, records each call with its call stack, and counts
# the calls with keyauth-server's responder on the stack, divided by the logins it served
# (--logins, the benchmark's warm-up of a tenth, at least 100, and its last login).
set -euo pipefail
cd "$(dirname "$0")/../.."

alg=RS256
logins=1000
compare=""
log=()
while [ $# -gt 0 ]; do
    case "$1" in
    --alg) alg=${2:?}; shift 2 ;;
    --logins) logins=${2:?}; shift 2 ;;
    --compare-bench) compare=${2:?}; shift 2 ;;
    --log) log=(--log "${2:?}"); shift 2 ;;
    *) echo "usage: $0 [--alg RS256|ES256] [--logins N] [--log text|json] [--compare-bench PATH]" >&2; exit 64 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "count-login-path.sh: uprobes need root" >&2; exit 77; }
command -v perf >/dev/null || { echo "count-login-path.sh: needs perf (apt-get install linux-perf)" >&2; exit 69; }

# shellcheck disable=SC2034 # read by release-bin.sh
release_products="keyauth-bench"
# shellcheck source=Benchmarks/release-bin.sh
. Benchmarks/release-bin.sh

swift_core=$(dirname "$(command -v swift)")/../lib/swift/linux/libswiftCore.so
libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64|libc\.so\.6 .*x86_64/ { print $NF; exit }')
if [ ! -f "$swift_core" ] || [ -z "$libc" ]; then
    echo "count-login-path.sh: cannot find libswiftCore or libc" >&2
    exit 69
fi
work=$(mktemp -d)
probes=()
cleanup() {
    for probe in "${probes[@]}"; do perf probe -q -d "$probe" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
for target in "$libc:malloc" "$swift_core:swift_retain" "$swift_core:swift_release"; do
    library=${target%:*}
    function=${target##*:}
    event=$(perf probe -x "$library" "$function" 2>&1 | awk '/Added new event/ { getline; print $1; exit }')
    [ -n "$event" ] || { echo "count-login-path.sh: cannot place a uprobe on $function" >&2; exit 69; }
    probes+=("$event")
done

served=$((logins + (logins / 10 > 100 ? logins / 10 : 100) + 1))
count() {
    local name=$1 binary=$2
    local events=()
    for probe in "${probes[@]}"; do events+=(-e "$probe"); done
    perf record -q -c 1 -g -o "$work/$name.perf" "${events[@]}" -- \
        "$binary" login-path --alg "$alg" --logins "$logins" "${log[@]}" >/dev/null 2>&1
    perf script -F event,ip,sym -i "$work/$name.perf" 2>/dev/null | python3 -c '
import collections, sys
counts = collections.Counter()
event, under = None, False
def finish():
    if event and under:
        counts[event] += 1
for line in sys.stdin:
    if not line.strip():
        finish()
        event, under = None, False
    elif line.lstrip().startswith("probe_"):
        event = line.strip().rstrip(":").split(":")[-1]
    elif "9ResponderC7respond2to" in line:
        under = True
finish()
served = int(sys.argv[2])
print("%-16s %8.1f %14.1f %15.1f" % (sys.argv[1], counts["malloc"] / served,
      counts["swift_retain"] / served, counts["swift_release"] / served))
' "$name" "$served"
}

echo "calls per $alg login under the responder (keyauth-bench login-path --logins $logins ${log[*]}, $served logins served)"
printf '%-16s %8s %14s %15s\n' build malloc swift_retain swift_release
count this "$bin/keyauth-bench"
[ -z "$compare" ] || count compared "$compare"
