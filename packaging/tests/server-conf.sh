#!/usr/bin/env bash
# Checks that the example settings file lists every `keyauth-server serve` option and nothing
# else:
#
#   bash packaging/tests/server-conf.sh BIN_DIR SERVER_CONF
#
# Each option of `keyauth-server --help` (but --help, --version and --config) must have a line
# `#NAME = ...` or `NAME = ...` in SERVER_CONF (packaging/etc/keyauth/server.conf, or
# /etc/keyauth/server.conf once installed), NAME being the option without its dashes, and every
# such line must name an option; and `keyauth-server check-config --config SERVER_CONF` must
# accept the file. Prints what is wrong and exits 1; exits 0 when nothing is.
set -euo pipefail

bin_dir=$1
conf=$2
test_name=server-conf
# shellcheck source=packaging/tests/common.sh
source "$(dirname "$0")/common.sh"

options=$("$bin_dir/keyauth-server" --help | awk '/options/ { inside = 1 } inside' |
    grep -oE -- '^ +--[a-z][a-z0-9-]*' | sed -E 's/^ +--//' | grep -vxE 'help|version|config' | sort -u)
keys=$(grep -oE '^#?[a-z][a-z0-9-]* *=' "$conf" | tr -d '#= ' | sort -u)
[ -n "$options" ] || fail "keyauth-server --help lists no options"
for option in $options; do
    grep -qx -- "$option" <<<"$keys" || fail "$conf has no line for --$option"
done
for key in $keys; do
    grep -qx -- "$key" <<<"$options" || fail "$conf sets $key, which is not an option of keyauth-server serve"
done
checked=$(env -i PATH=/usr/bin:/bin "$bin_dir/keyauth-server" check-config --config "$conf" 2>&1) ||
    fail "keyauth-server check-config refuses $conf: $checked"
finish "$conf lists the $(wc -l <<<"$options") options of keyauth-server serve"
