#!/usr/bin/env bash
# Installs what keyauth needs on Debian (as root): the C libraries' -dev packages (libcurl's for
# Foundation's networking when the Swift runtime is linked statically), the PostgreSQL server
# for the storage tests, the TPM stack (OpenSSL's tpm2 provider, the TSS libraries, and a
# software TPM for the TPM tests), the tools that build and check the Debian package (dpkg-dev,
# lintian, man-db, binutils, adduser, systemd for systemd-analyze, python3 for the man pages;
# gdb, systemd-coredump with libdw1 for its stack traces, and systemd-container, whose
# systemd-nspawn boots a systemd for the crash test where systemd is not PID 1),
# and PyJWT, cryptography and jwcrypto for the interoperability tests (Debian's, for
# /usr/bin/python3: on Debian 12 pip refuses to install into the system Python); chromium,
# chromium-driver and python3-selenium for the browser tests; apache2 with
# libapache2-mod-auth-openidc, a real OpenID Connect relying party signing in through
# keyauth-server, and python3-authlib with python3-requests, an independent OAuth client library
# running the code flow; pamtester and sudo, which run the PAM module's tests through real libpam.
# faketime (libfaketime) runs a server instance with its clock off for the clock-skew tests.
# Idempotent: it only calls apt-get when a package is missing.
set -euo pipefail

packages=(pkg-config openssl curl libssl-dev libpam0g-dev libmicrohttpd-dev libsqlite3-dev libpq-dev
    libcurl4-openssl-dev postgresql wrk python3 dpkg-dev lintian man-db binutils adduser systemd
    gdb systemd-coredump libdw1 systemd-container
    tpm2-openssl libtss2-dev libtss2-tcti-swtpm0 swtpm swtpm-tools tpm2-tools python3-jwt python3-cryptography
    python3-jwcrypto chromium chromium-driver python3-selenium apache2 libapache2-mod-auth-openidc python3-authlib
    python3-requests pamtester sudo)
# A real OpenSSH server and client for the SSH certificate tests.
packages+=(openssh-server openssh-client)
# libfaketime, which runs a second server instance with its clock off for the clock-skew tests.
packages+=(faketime)
# notify-send, whose option parsing the desktop notification test checks `keyauth requests
# --watch` against.
packages+=(libnotify-bin)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! python3 -c 'import jwt, cryptography' 2>/dev/null; then
    echo "installing: PyJWT cryptography (pip)" >&2
    python3 -m pip install -q --disable-pip-version-check PyJWT cryptography 2>&1 | grep -v -i "warning: running pip as" >&2 || true
fi
