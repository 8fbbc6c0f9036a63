#!/usr/bin/env bash
# Checks that a crash of keyauth-server under its systemd unit can be diagnosed, with the
# packages keyauth and keyauth-dbgsym installed (as root, by .ci/package.sh):
#
#   bash packaging/tests/crash.sh
#
# 1. Each installed binary is stripped, names its debug file by GNU build ID, and the file is
#    there; gdb on the stripped keyauth-server finds its functions and their source files.
# 2. A real systemd runs the installed unit: systemd-coredump collects the core of a crashed
#    server, `coredumpctl info` shows a stack trace with keyauth-server's functions, gdb on the
#    core (`coredumpctl debug`) prints a backtrace naming them, the unit restarts the server
#    (Restart=on-failure), and it stops restarting after StartLimitBurst starts.
#
# The crash is a SIGILL sent with kill, the signal a Swift trap raises: the core is the same as
# a trap's, and the server has no crash trigger of its own (none may be reachable from the
# network). Later crashes of the restart loop are SIGKILLs, which leave no core to process.
#
# Where systemd is not PID 1 (a container, a CI VM), step 2 boots one with systemd-nspawn on an
# overlay of this machine's root (the upper layer a tmpfs, so nothing it writes stays) with a
# private network, to a target of journald and systemd-coredump.socket alone; starting
# keyauth-server adds sysinit.target, whose units act on the overlay and the container's own
# mounts (nspawn leaves /proc/sys and /sys read-only to it, so they change nothing on the host).
# The kernel runs the core_pattern helper on the host, so for the test the host's core_pattern
# pipes to systemd-coredump (as the systemd-coredump package sets it at boot) and the host's
# /run/systemd/coredump is a link to the container's socket; both are put back afterwards. Where
# systemd is PID 1, step 2 uses it and its systemd-coredump directly.
#
# Needs: gdb, systemd-coredump, libdw1 (its stack traces), systemd-container (systemd-nspawn)
# unless systemd is PID 1. Prints what is wrong and exits 1; exits 0 when nothing is.
set -euo pipefail

test_name=crash
# shellcheck source=packaging/tests/common.sh
source "$(dirname "$0")/common.sh"
log() { echo "$test_name: $*" >&2; }

[ "$(id -u)" -eq 0 ] || {
    fail "run as root"
    finish ""
}
for tool in gdb coredumpctl readelf; do
    command -v "$tool" >/dev/null || fail "$tool is missing (install gdb, systemd-coredump, binutils)"
done
[ "$failures" -eq 0 ] || finish ""

echo "== debug symbols" >&2
for program in keyauth keyauth-server; do
    binary=/usr/bin/$program
    build_id=$(readelf --notes "$binary" | sed -n 's/^ *Build ID: \([0-9a-f]*\)$/\1/p')
    if [ -z "$build_id" ]; then
        fail "$binary has no GNU build ID"
        continue
    fi
    if readelf --section-headers "$binary" | grep -qE ' \.(symtab|debug_info) '; then
        fail "$binary is not stripped"
    fi
    debug_file=/usr/lib/debug/.build-id/${build_id:0:2}/${build_id:2}.debug
    [ -f "$debug_file" ] || fail "no $debug_file for $binary (is keyauth-dbgsym installed?)"
    dpkg -S "$debug_file" 2>/dev/null | grep -q '^keyauth-dbgsym:' || fail "$debug_file does not belong to keyauth-dbgsym"
done
# gdb finds the debug file by build ID: the stripped binary alone knows no ServerCommand.serve
# (its Swift symbol, $s13KeyAuthServer0C7CommandO5serve_..., nor its source file).
functions=$(gdb -nx -batch -ex 'info functions CommandO5serve_' /usr/bin/keyauth-server 2>&1)
grep -q '^File .*/ServerCommand+Serve\.swift:$' <<<"$functions" ||
    fail "gdb finds no ServerCommand.serve in /usr/bin/keyauth-server: $(grep -v '^During' <<<"$functions" | head -5)"

echo "== a crash under systemd" >&2
# Problems before this step do not stop it; its own setup problems do.
earlier_failures=$failures
unit=keyauth-server.service
pattern='|/lib/systemd/systemd-coredump %P %u %g %s %t 9223372036854775808 %h %d'
scratch=$(mktemp -d)
cleanups=()
cleanup() {
    local index
    for ((index = ${#cleanups[@]} - 1; index >= 0; index--)); do
        eval "${cleanups[index]}" || true
    done
    rm -rf "$scratch"
}
trap cleanup EXIT

if [ -d /run/systemd/system ]; then
    log_source="systemd (PID 1)"
    in_systemd() { timeout 60 "$@"; }
    grep -q systemd-coredump /proc/sys/kernel/core_pattern ||
        fail "core_pattern does not pipe to systemd-coredump: $(cat /proc/sys/kernel/core_pattern)"
    cleanups+=("systemctl stop $unit; systemctl reset-failed $unit")
else
    log_source="systemd in a systemd-nspawn container"
    command -v systemd-nspawn >/dev/null || fail "systemd-nspawn is missing (install systemd-container)"
    [ ! -e /run/systemd/coredump ] && [ ! -L /run/systemd/coredump ] ||
        fail "/run/systemd/coredump exists while systemd is not PID 1: another test running?"
    [ "$failures" -eq "$earlier_failures" ] || finish ""

    # The container's own units: a target with journald, systemd-coredump.socket listening where
    # the host can reach it, and nothing else that boot would start.
    units=$scratch/units
    mkdir -p "$units/systemd-coredump.socket.d" "$scratch/socket"
    printf '[Unit]\nDescription=keyauth crash test\nWants=systemd-journald.service systemd-coredump.socket\n' \
        >"$units/keyauth-crash-test.target"
    printf '[Socket]\nListenSequentialPacket=\nListenSequentialPacket=/run/keyauth-crash-test/coredump\n' \
        >"$units/systemd-coredump.socket.d/keyauth-crash-test.conf"

    # nspawn keeps its state in /run/systemd/nspawn, which must be a tmpfs: a private one.
    for directory in /run/systemd /run/systemd/nspawn; do
        if [ ! -d "$directory" ]; then
            mkdir "$directory"
            cleanups+=("rmdir $directory")
        fi
    done
    # A cgroup of its own, so that nspawn's payload and supervisor groups go under it.
    cgroups=()
    if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
        cgroups+=(/sys/fs/cgroup/keyauth-crash-test)
    else
        for hierarchy in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified; do
            [ -d "$hierarchy" ] && cgroups+=("$hierarchy/keyauth-crash-test")
        done
    fi
    for group in "${cgroups[@]}"; do
        mkdir "$group"
        cleanups+=("find $group -depth -type d -exec rmdir {} +")
    done

    overlay=$scratch/overlay
    mkdir "$overlay"
    (
        for group in "${cgroups[@]}"; do echo "$BASHPID" >"$group/cgroup.procs"; done
        exec unshare --mount --propagation private bash -c '
            set -e
            overlay=$1 units=$2 socket=$3
            mount -t tmpfs -o mode=0755 keyauth-crash-test "$overlay"
            mkdir "$overlay/upper" "$overlay/work" "$overlay/root"
            mount -t overlay keyauth-crash-test -o "lowerdir=/,upperdir=$overlay/upper,workdir=$overlay/work" "$overlay/root"
            cp -r "$units/." "$overlay/root/etc/systemd/system/"
            mount -t tmpfs -o mode=0755 keyauth-crash-test /run/systemd/nspawn
            exec systemd-nspawn --quiet --register=no --keep-unit --link-journal=no --private-network \
                --console=passive --machine=keyauth-crash-test --directory="$overlay/root" \
                --bind="$socket:/run/keyauth-crash-test" --boot -- --unit=keyauth-crash-test.target' \
            bash "$overlay" "$units" "$scratch/socket"
    ) >"$scratch/nspawn.log" 2>&1 &
    nspawn=$!
    cleanups+=("kill -TERM $nspawn 2>/dev/null && timeout 30 tail --pid=$nspawn -f /dev/null || kill -KILL $nspawn")

    leader=
    for _ in $(seq 100); do
        leader=$(ps -o pid= --ppid "$nspawn" | tr -d ' ' | head -1) || true
        [ -n "$leader" ] && [ "$(timeout 10 nsenter --target "$leader" --mount --pid systemctl is-system-running 2>/dev/null)" = running ] && break
        kill -0 "$nspawn" 2>/dev/null || break
        sleep 0.3
    done
    if [ -z "$leader" ] || ! timeout 10 nsenter --target "$leader" --mount --pid systemctl is-system-running >/dev/null 2>&1; then
        fail "the container's systemd did not come up: $(tail -20 "$scratch/nspawn.log")"
        finish ""
    fi
    in_systemd() { timeout 60 nsenter --target "$leader" --mount --uts --ipc --net --pid -- "$@"; }

    saved_pattern=$(cat /proc/sys/kernel/core_pattern)
    saved_pipe_limit=$(cat /proc/sys/kernel/core_pipe_limit)
    ln -s "$scratch/socket/coredump" /run/systemd/coredump
    cleanups+=("rm -f /run/systemd/coredump")
    printf '%s\n' "$pattern" >/proc/sys/kernel/core_pattern
    cleanups+=("printf '%s\n' $(printf %q "$saved_pattern") >/proc/sys/kernel/core_pattern")
    # As systemd-coredump's sysctl.d file sets it: the kernel keeps the crashed process until the
    # helper has read /proc/PID.
    echo 16 >/proc/sys/kernel/core_pipe_limit
    cleanups+=("echo $saved_pipe_limit >/proc/sys/kernel/core_pipe_limit")
fi
log "systemd: $log_source"

# The unit's value of a property.
property() { in_systemd systemctl show --property="$1" --value "$unit"; }

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
    local seconds=$1
    shift
    for _ in $(seq $((seconds * 5))); do
        "$@" && return 0
        sleep 0.2
    done
    return 1
}
active_with_new_pid() { [ "$(property ActiveState)" = active ] && [ "$(property MainPID)" != "$1" ] && [ "$(property MainPID)" != 0 ]; }
# Whether the server of the unit's current run has printed its start line.
serving() {
    local run
    run=$(property InvocationID)
    [ -n "$run" ] && in_systemd journalctl --no-pager --output=cat "_SYSTEMD_INVOCATION_ID=$run" | grep -q 'listening on'
}

[ "$(property Restart)" = on-failure ] || fail "Restart=$(property Restart), not on-failure"
[ "$(property StartLimitBurst)" = 10 ] || fail "StartLimitBurst=$(property StartLimitBurst), not 10"
[ "$(property StartLimitIntervalUSec)" = 1min ] || fail "StartLimitIntervalSec=$(property StartLimitIntervalUSec), not 1min"

if ! in_systemd systemctl start "$unit" || ! wait_for 30 serving; then
    fail "keyauth-server did not start: $(in_systemd journalctl --no-pager --unit="$unit" | tail -5)"
    finish ""
fi
first_pid=$(property MainPID)
# Only what happens from here on counts (where systemd is PID 1, the journal and the cores of
# earlier runs are there too).
since=--since=@$(date +%s)

# The crash: SIGILL, as a Swift trap (an overflow, a failed precondition) raises it.
in_systemd kill -ILL "$first_pid"
exe=/usr/bin/keyauth-server
wait_for 120 in_systemd coredumpctl --quiet --no-pager "$since" list "$exe" >/dev/null ||
    fail "coredumpctl lists no core of $exe: $(in_systemd journalctl --no-pager | tail -15)"
info=$(in_systemd coredumpctl --no-pager "$since" info "$exe" 2>&1)
grep -q 'Signal: 4 (ILL)' <<<"$info" || fail "coredumpctl info shows no SIGILL: $(head -12 <<<"$info")"
grep -qE 'Storage: .* \(present\)' <<<"$info" || fail "coredumpctl kept no core: $(grep Storage <<<"$info")"
# The journal's stack trace names the main thread's ServerCommand.serve (by its Swift symbol,
# $s13KeyAuthServer0C7CommandO5serve_...): an internal function, which only keyauth-dbgsym's
# symbol table has (public ones such as ServerCommand.main are in the binary's dynamic symbols).
grep -qE '^ *#[0-9]+ +0x[0-9a-f]+ \$s13KeyAuthServer0C7CommandO5serve_.* \(keyauth-server \+ 0x' <<<"$info" ||
    fail "the stack trace does not name ServerCommand.serve: $(grep -A12 'Stack trace' <<<"$info" | head -14)"
log "coredumpctl info: $(grep -m1 -E 'CommandO5serve_' <<<"$info" | sed 's/^ *//')"

backtrace=$(in_systemd coredumpctl --no-pager "$since" debug --debugger-arguments="-nx -batch -ex 'thread apply all bt'" "$exe" 2>&1)
# The main thread waits in ServerCommand.serve for SIGTERM: gdb names it, with file and line.
grep -qE '^#[0-9]+ .*KeyAuthServer.* at .*/ServerCommand\+Serve\.swift:[0-9]+$' <<<"$backtrace" ||
    fail "gdb on the core shows no ServerCommand.serve frame with its line: $(grep -E '^#[0-9]' <<<"$backtrace" | head -8)"
log "gdb: $(grep -m1 -E '^#[0-9]+ .*ServerCommand\+Serve\.swift:' <<<"$backtrace" | sed -E 's/^(.{70}).* at /\1... at /')"

in_systemd journalctl --no-pager "$since" --unit="$unit" --output=cat | grep -q 'Main process exited, code=dumped, status=4/ILL' ||
    fail "the journal does not say the server dumped core with SIGILL"
wait_for 30 active_with_new_pid "$first_pid" || fail "the server was not restarted after the crash ($(property ActiveState))"
wait_for 30 serving || fail "the restarted server is not listening"
[ "$(property NRestarts)" = 1 ] || fail "NRestarts=$(property NRestarts) after one crash"

# A crash loop: the tenth start within StartLimitIntervalSec is the last. Kill each new server as
# soon as it runs until the unit stays failed (after-crash waits are "activating"), for at most 90
# seconds.
deadline=$(($(date +%s) + 90))
pid=none
while [ "$(date +%s)" -lt "$deadline" ] && [ "$(property ActiveState)" != failed ]; do
    if active_with_new_pid "$pid"; then
        pid=$(property MainPID)
        in_systemd kill -KILL "$pid" || true
    fi
    sleep 0.2
done
loop=$(in_systemd journalctl --no-pager "$since" --unit="$unit" --output=cat)
if [ "$(property ActiveState)" != failed ] || ! grep -q 'Start request repeated too quickly' <<<"$loop"; then
    fail "the crash loop did not hit the start limit: $(property ActiveState), $(property NRestarts) restarts: $(tail -5 <<<"$loop")"
else
    # The restart refused is the tenth: the first start and nine restarts make StartLimitBurst=10.
    refused=$(grep -o 'restart counter is at [0-9]*' <<<"$loop" | tail -1 | grep -o '[0-9]*$')
    [ "$refused" = 10 ] || fail "restart $refused was refused, not restart 10"
    restarts=$(property NRestarts)
    sleep 3
    [ "$(property ActiveState)" = failed ] && [ "$(property NRestarts)" = "$restarts" ] ||
        fail "the unit restarted after the start limit: $(property ActiveState)"
    log "restart $refused: $(grep -m1 'Start request repeated too quickly' <<<"$loop")"
fi

finish "a crash under $log_source leaves a core and a symbolized stack trace; the unit restarts the server and gives up after 10 starts in a minute"
