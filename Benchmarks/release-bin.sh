# shellcheck shell=bash
# Sourced by the benchmark scripts: sets bin to the directory of the keyauth and keyauth-server
# binaries to measure, $KEYAUTH_BENCH_BIN when set (.build-deb/release after scripts/build-deb.sh),
# else the release builds, made now. A script that needs other products sets release_products
# (space-separated) before sourcing this file.
if [ -n "${KEYAUTH_BENCH_BIN:-}" ]; then
    bin=$KEYAUTH_BENCH_BIN
else
    for product in ${release_products:-keyauth keyauth-server}; do
        swift build -c release --product "$product" >&2
    done
    # shellcheck disable=SC2034 # read by the scripts that source this file
    bin=$(swift build -c release --show-bin-path)
fi
