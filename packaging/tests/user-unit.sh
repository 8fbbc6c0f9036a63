#!/usr/bin/env bash
# Checks the systemd user unit of keyauth agent with `systemd-analyze verify --user`:
#
#   bash packaging/tests/user-unit.sh UNIT [KEYAUTH]
#
# UNIT is keyauth-agent.service (packaging/systemd, or /usr/lib/systemd/user once installed).
# With KEYAUTH (a built binary), the unit is checked with its ExecStart pointing there, for a
# machine where keyauth is not installed in /usr/bin (and without its man page); the binary must also accept the command
# line the unit runs (`keyauth agent --serve-locked --help`). A user manager needs a runtime
# directory, so a private one stands in when XDG_RUNTIME_DIR is unset. Any word of
# systemd-analyze (an unknown key, a missing executable) is a failure. Exits 1 on a problem.
set -euo pipefail

unit=$1
keyauth=${2:-}
[ -z "$keyauth" ] || keyauth=$(realpath "$keyauth")
test_name=user-unit
# shellcheck source=packaging/tests/common.sh
source "$(dirname "$0")/common.sh"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
chmod 700 "$scratch"
checked=$scratch/$(basename "$unit")
# Documentation= names man:keyauth(1), which only an installed package has.
man=yes
if [ -n "$keyauth" ]; then
    man=no
    sed "s#^ExecStart=/usr/bin/keyauth #ExecStart=$keyauth #" "$unit" >"$checked"
    "$keyauth" agent --serve-locked --help >/dev/null || fail "$keyauth refuses agent --serve-locked --help"
else
    cp "$unit" "$checked"
fi
grep -q '^ExecStart=.* agent --serve-locked$' "$checked" || fail "ExecStart does not run keyauth agent --serve-locked"
grep -q '^WantedBy=default.target$' "$checked" || fail "not wanted by default.target"

mkdir -p "$scratch/run"
chmod 700 "$scratch/run"
if ! output=$(XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$scratch/run} timeout 60 systemd-analyze verify --user --man=$man "$checked" 2>&1); then
    fail "systemd-analyze verify --user failed: $output"
elif [ -n "$output" ]; then
    fail "systemd-analyze verify --user: $output"
fi
finish "keyauth-agent.service passes systemd-analyze verify --user"
