#!/usr/bin/env bash
# Removes what a killed host-login test run leaves behind. Each HostLoginMachine adds a user
# kapam<8 hex>, a PAM service /etc/pam.d/keyauth-test-<8 hex>, perhaps a sudoers drop-in of the
# same name, and a /dev/log socket when the machine has no syslog daemon; it removes them when it
# stops, which a killed process never does. Left in place they are harmless to the tests but make
# .ci/package.sh fail, rightly, on "the package enabled pam_keyauth in /etc/pam.d".
# Run only when no test run is under way on this machine: .ci/run calls it before the tests.
set -euo pipefail

shopt -s nullglob
for leftover in /etc/pam.d/keyauth-test-* /etc/sudoers.d/keyauth-test-*; do
    echo "removing $leftover, left by a killed test run" >&2
    rm -f -- "$leftover"
done

getent passwd | awk -F: '$1 ~ /^kapam[0-9a-f]+$/ && length($1) == 13 {print $1}' | while read -r user; do
    echo "removing the user $user, left by a killed test run" >&2
    userdel --remove "$user" 2>/dev/null || userdel "$user"
done

# A /dev/log that nothing listens on is the test's own socket, left when its process died.
if [ -S /dev/log ] && ! python3 -c '
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.connect("/dev/log")' 2>/dev/null; then
    echo "removing /dev/log, which nothing listens on" >&2
    rm -f /dev/log
fi
