#!/usr/bin/env bash
# Type-checks every program under Examples/ against the built KeyAuth module the way an app
# outside this package sees it, so that what the README and the examples show compiles with the
# public API alone:
#
#   bash scripts/check-public-api.sh        (after `swift build`)
#
# `swift build` compiles the examples as targets of this package, where `package` symbols are
# visible; here they are compiled without `-package-name`, as a dependent package would, so an
# example that needs a `package` symbol fails: that symbol is one an app needs, and is made
# public (and listed in the DocC topics). Type-checking only, a few seconds per example.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=$(swift build --show-bin-path)
# Swift 6 toolchains put the module files under Modules/; older ones beside the products.
modules="$bin/Modules"
[ -d "$modules" ] || modules="$bin"
if [ ! -f "$modules/KeyAuth.swiftmodule" ] && [ ! -d "$modules/KeyAuth.swiftmodule" ]; then
    echo "check-public-api: no KeyAuth module in $modules; run swift build first" >&2
    exit 1
fi

status=0
for main in Examples/*/main.swift; do
    # KeyAuth imports its C modules with `internal import`; the compiler may still load them.
    if swiftc -typecheck -swift-version 6 -module-name "$(basename "$(dirname "$main")")" \
        -I "$modules" -I Sources/CKeyAuthCurl -I Sources/CKeyAuthOpenSSL -I Sources/CKeyAuthPAM -I Sources/CKeyAuthTSS2 "$main"; then
        echo "check-public-api: $main compiles against the public API" >&2
    else
        echo "check-public-api: $main needs more than the public API (see above)" >&2
        status=1
    fi
done
exit "$status"
