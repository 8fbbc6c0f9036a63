#!/usr/bin/env bash
# CI: builds the Debian packages keyauth and keyauth-dbgsym, checks them with lintian, installs
# them, checks what they installed, and purges them again, checking that nothing of them is left.
#
#   bash .ci/package.sh        (as root, on a machine where keyauth is not installed)
#
# After `dpkg -i`: the keyauth system user exists; `man keyauth` and `man keyauth-server` open
# and say what --help says (packaging/tests/manpages.sh); the bash completion completes
# (packaging/tests/completion.sh); /etc/keyauth/server.conf lists every serve option
# (packaging/tests/server-conf.sh); the unit passes `systemd-analyze verify` and scores "OK" or
# better in `systemd-analyze security`, and the agent's user unit passes `systemd-analyze verify
# --user` (packaging/tests/user-unit.sh); the binaries run with /opt/swift hidden; and the
# installed server, run as the keyauth user on /var/lib/keyauth as the unit runs it, registers
# a device and logs it in; and a crash of the server under the unit, in a real systemd, leaves a
# core with a symbolized backtrace, a restart, and a stop after the start limit
# (packaging/tests/crash.sh). Then `dpkg --purge` must remove every file `dpkg -L` listed,
# /var/lib/keyauth and the link `systemctl enable` made; the keyauth user stays (Debian policy).
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

log() { echo "package.sh: $*" >&2; }
die() {
    log "FAILED: $*"
    exit 1
}

[ "$(id -u)" -eq 0 ] || die "run as root: it installs and purges the package"
for package in keyauth keyauth-dbgsym; do
    if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q installed; then
        die "$package is installed on this machine; this check installs and purges it (with /var/lib/keyauth), so run it elsewhere"
    fi
done
for leftover in /var/lib/keyauth /etc/keyauth; do
    [ ! -e "$leftover" ] || die "$leftover exists; this check would delete it on purge, so run it elsewhere"
done

echo "== build-deb" >&2
mapfile -t debs < <(bash scripts/build-deb.sh)
[ ${#debs[@]} -eq 2 ] || die "build-deb.sh printed ${#debs[@]} paths, not the two packages"
deb=${debs[0]}
dbgsym=${debs[1]}
version=$(dpkg-deb -f "$deb" Version)
for package in "${debs[@]}"; do
    log "$package: $(du -h "$package" | cut -f1), Installed-Size $(dpkg-deb -f "$package" Installed-Size) KiB"
done
log "Depends: $(dpkg-deb -f "$deb" Depends)"
[ "$(dpkg-deb -f "$dbgsym" Package)" = keyauth-dbgsym ] || die "$dbgsym is not keyauth-dbgsym"
[ "$(dpkg-deb -f "$dbgsym" Depends)" = "keyauth (= $version)" ] || die "keyauth-dbgsym does not depend on keyauth (= $version)"

echo "== lintian" >&2
lintian --fail-on error --display-info "${debs[@]}" 2>&1 | grep -v -e 'running with root privileges' -e spelling-error-in-binary >&2 || true
lintian --fail-on error "${debs[@]}" >/dev/null 2>&1 || die "lintian reports errors"

echo "== install" >&2
# --path-include: container images often exclude man pages and docs from every package.
dpkg --path-include='/usr/share/man/*' --path-include='/usr/share/doc/keyauth/*' -i "$deb" "$dbgsym" >&2
cleanup() {
    if dpkg-query -W -f='${Status}' keyauth 2>/dev/null | grep -q installed; then
        log "purging keyauth and keyauth-dbgsym after a failure"
        dpkg --purge keyauth-dbgsym keyauth >&2 || true
    fi
}
trap cleanup EXIT
files=$(mktemp)
dpkg -L keyauth keyauth-dbgsym >"$files"

getent passwd keyauth | grep -q ':/var/lib/keyauth:' || die "no keyauth user with home /var/lib/keyauth"
[ "$(id -u keyauth)" -lt 1000 ] || die "the keyauth user is not a system user"
getent group keyauth >/dev/null || die "no keyauth group"
dpkg-query -W -f='${Conffiles}\n' keyauth | grep -q ' /etc/keyauth/server.conf ' || die "server.conf is not a conffile"
dpkg-query -W -f='${Conffiles}\n' keyauth | grep -q ' /etc/pam.d/keyauth ' || die "/etc/pam.d/keyauth is not a conffile"

echo "== PAM module" >&2
module=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/security/pam_keyauth.so
[ -f "$module" ] || die "no $module"
[ "$(readlink -f /usr/libexec/keyauth/keyauth-pam-helper)" = /usr/bin/keyauth ] ||
    die "/usr/libexec/keyauth/keyauth-pam-helper is not a link to keyauth"
for symbol in pam_sm_authenticate pam_sm_setcred pam_sm_acct_mgmt; do
    nm -D --defined-only "$module" | grep -q " T $symbol\$" || die "$module does not export $symbol"
done
! ldd "$module" | grep -qi swift || die "$module loads a Swift library"
[ -f /usr/share/doc/keyauth/examples/pam.d/keyauth ] || die "no example PAM stack"
# Installed, never enabled: no service of the machine names the module.
! grep -rl pam_keyauth /etc/pam.d >/dev/null 2>&1 || die "the package enabled pam_keyauth in /etc/pam.d"

echo "== man pages" >&2
[ "$(man -w keyauth)" = /usr/share/man/man1/keyauth.1.gz ] || die "man -w keyauth: $(man -w keyauth 2>&1)"
[ "$(man -w keyauth-server)" = /usr/share/man/man8/keyauth-server.8.gz ] || die "man -w keyauth-server"
MANPAGER=cat MANWIDTH=80 man keyauth-server 2>/dev/null | head -5 | grep -q 'keyauth-server - ' || die "man keyauth-server shows no NAME line"
MANPAGER=cat MANWIDTH=80 man keyauth 2>/dev/null | grep -q '^COMMANDS' || die "man keyauth shows no COMMANDS"
bash packaging/tests/manpages.sh /usr/bin /usr/share/man >&2

echo "== completions" >&2
bash packaging/tests/completion.sh /usr/share/bash-completion/completions /usr/bin >&2

echo "== settings file" >&2
bash packaging/tests/server-conf.sh /usr/bin /etc/keyauth/server.conf >&2

echo "== systemd" >&2
unit=/lib/systemd/system/keyauth-server.service
verify=$(systemd-analyze verify "$unit" 2>&1) || die "systemd-analyze verify: $verify"
[ -z "$verify" ] || die "systemd-analyze verify: $verify"
security=$(systemd-analyze security --offline=yes "$unit" 2>&1 | grep 'Overall exposure level') ||
    die "systemd-analyze security printed no exposure level"
log "$security"
grep -qE ': [0-9.]+ (SAFE|OK) ' <<<"$security" || die "the unit's exposure is worse than OK"
bash packaging/tests/user-unit.sh /usr/lib/systemd/user/keyauth-agent.service >&2

echo "== binaries without the Swift toolchain" >&2
if ldd /usr/bin/keyauth /usr/bin/keyauth-server | grep -q /opt/swift; then
    die "a binary loads a library from /opt/swift"
fi
upstream=${version%-*}
[ "$(env -i PATH=/usr/bin:/bin keyauth --version)" = "keyauth $upstream" ] || die "keyauth --version"
[ "$(env -i PATH=/usr/bin:/bin keyauth-server --version)" = "keyauth-server $upstream" ] || die "keyauth-server --version"
if [ -d /opt/swift ] && unshare --mount true 2>/dev/null; then
    # With /opt/swift empty, as on a machine that never had the toolchain.
    hidden=$(unshare --mount sh -c 'mount -t tmpfs none /opt/swift && env -i PATH=/usr/bin:/bin keyauth-server --version')
    [ "$hidden" = "keyauth-server $upstream" ] || die "keyauth-server --version with /opt/swift hidden: $hidden"
    log "keyauth-server --version runs with /opt/swift hidden"
fi

echo "== the installed server, as the unit runs it" >&2
# systemd would create the state directory (StateDirectory=keyauth, mode 0700); without a
# running systemd, do the same by hand so that purge has it to remove.
install -d -m 0700 -o keyauth -g keyauth /var/lib/keyauth
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server_log=$(mktemp)
as_keyauth=(setpriv --reuid=keyauth --regid=keyauth --clear-groups --)
(cd /var/lib/keyauth && exec "${as_keyauth[@]}" env -i PATH=/usr/bin:/bin \
    keyauth-server serve --config /etc/keyauth/server.conf --listen "127.0.0.1:$port" --metrics-listen off) 2>"$server_log" &
server=$!
for _ in $(seq 50); do
    grep -q 'listening on' "$server_log" && break
    sleep 0.2
done
grep -q 'listening on' "$server_log" || die "the server did not start: $(cat "$server_log")"
# The database from /etc/keyauth/server.conf, read by default.
code=$("${as_keyauth[@]}" keyauth-server enroll alice 2>/dev/null)
client_home=$(mktemp -d)
printf '%s\n' "$code" | env -i PATH=/usr/bin:/bin KEYAUTH_HOME="$client_home" keyauth register \
    --server "http://127.0.0.1:$port" --user alice --presence none --enrollment-code - >&2 ||
    die "keyauth register against the installed server"
env -i PATH=/usr/bin:/bin KEYAUTH_HOME="$client_home" keyauth login >&2 || die "keyauth login"
kill -TERM "$server"
wait "$server" || die "the server did not exit 0 on SIGTERM: $(cat "$server_log")"
[ "$(stat -c '%a %U' /var/lib/keyauth/keyauth-server.db)" = "600 keyauth" ] || die "the database is not 0600 keyauth"
rm -rf "$client_home" "$server_log"

echo "== a crash under systemd" >&2
bash packaging/tests/crash.sh >&2
# What `systemctl enable keyauth-server` leaves behind, for purge to remove.
ln -sf "$unit" /etc/systemd/system/multi-user.target.wants/keyauth-server.service

echo "== purge" >&2
dpkg --purge keyauth-dbgsym keyauth >&2
trap - EXIT
left=()
while IFS= read -r path; do
    [ -e "$path" ] || [ -L "$path" ] || continue
    # A directory other packages also use (/usr/bin, /etc/pam.d) stays. With /usr merged, dpkg
    # may know it under /lib (libpam-modules' /lib/x86_64-linux-gnu/security).
    if [ -d "$path" ] && { dpkg -S "$path" >/dev/null 2>&1 ||
        { [[ $path == /usr/lib/* ]] && dpkg -S "/lib/${path#/usr/lib/}" >/dev/null 2>&1; }; }; then
        continue
    fi
    [ "$path" = /. ] && continue
    left+=("$path")
done <"$files"
for path in /var/lib/keyauth /etc/keyauth /etc/systemd/system/multi-user.target.wants/keyauth-server.service; do
    [ -e "$path" ] || [ -L "$path" ] && left+=("$path")
done
rm -f "$files"
[ ${#left[@]} -eq 0 ] || die "left after purge: ${left[*]}"
getent passwd keyauth >/dev/null && log "the keyauth user stays after purge, as Debian policy asks"

log "the packages build, pass lintian, install, work and purge cleanly ($(($(date +%s) - started)) s)"
