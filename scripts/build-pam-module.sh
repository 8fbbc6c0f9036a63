#!/usr/bin/env bash
# Builds the PAM module pam_keyauth.so from PAMModule/ with the C compiler alone:
#
#   bash scripts/build-pam-module.sh OUTPUT
#
# The tests and the Debian package both build it here. Not a SwiftPM product: a SwiftPM dynamic
# library links libswiftCore (and libstdc++) even for C sources, and the module must load no
# Swift runtime, as it is loaded into sshd, sudo and login (docs/HOST-LOGIN.md). Debian's
# hardening flags come from dpkg-buildflags (fortify, stack protector, relro), and -z now.
set -euo pipefail
cd "$(dirname "$0")/.."
output=${1:?usage: build-pam-module.sh OUTPUT}
source=PAMModule
# shellcheck disable=SC2046 # word splitting of the flag lists is intended
cc $(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS) -Wall -Wextra -Werror -fPIC \
    -fvisibility=default -shared $(dpkg-buildflags --get LDFLAGS) -Wl,--as-needed \
    -Wl,-z,now -Wl,--build-id=sha1 -o "$output" "$source/pam_keyauth.c" -lpam
for symbol in pam_sm_authenticate pam_sm_setcred pam_sm_acct_mgmt; do
    if ! nm -D --defined-only "$output" | grep -q " T $symbol\$"; then
        echo "build-pam-module: $output does not export $symbol" >&2
        exit 1
    fi
done
if ldd "$output" | grep -qi swift; then
    echo "build-pam-module: $output loads a Swift library" >&2
    exit 1
fi
