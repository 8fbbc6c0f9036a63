#!/usr/bin/env bash
# Builds the token-parser fuzz target with libFuzzer and AddressSanitizer, then fuzzes it.
#
#   Fuzz/run.sh [SECONDS] [extra libFuzzer flags...]      fuzz for SECONDS (default 180)
#   Fuzz/run.sh --reproduce FILE...                       run the target once on each FILE
#
# The KeyAuth library sources are compiled together with Fuzz/TokenParser/main.swift into one
# module, so coverage instrumentation covers the library and the internal claim checks are
# reachable. New corpus entries go to a temporary directory (the seeds in Fuzz/corpus/ and the
# inputs in Fuzz/findings/ are read, never modified); crash inputs go to
# $KEYAUTH_FUZZ_OUT/artifacts/. Exit status: 0 when the time ran out without a finding, non-zero
# on a crash, a failed invariant, a leak or a build failure.
#
# Environment:
#   KEYAUTH_FUZZ_OUT         build and artifact directory (default .build-fuzz/fuzz in the package)
#   KEYAUTH_FUZZ_SKIP_KNOWN  all, or a comma-separated list of the finding names in
#                            Fuzz/README.md, to step around those findings
set -euo pipefail

# Swift's own crash reporter would attach to every crash and can outlive libFuzzer's report.
export SWIFT_BACKTRACE=enable=no

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${KEYAUTH_FUZZ_OUT:-$root/.build-fuzz/fuzz}"
binary="$out/token-parser"
mkdir -p "$out/artifacts"

sources=()
while IFS= read -r -d '' file; do
    sources+=("$file")
done < <(find "$root/Sources/KeyAuth" -name '*.swift' -print0 | sort -z)

# Rebuilt only when a source (or this script) is newer than the binary.
inputs=("$root/Sources/KeyAuth" "$root/Sources/CKeyAuthOpenSSL" "$root/Sources/CKeyAuthPAM" "$root/Sources/CKeyAuthTSS2" "$here/TokenParser" "$0")
if [ ! -x "$binary" ] || [ -n "$(find "${inputs[@]}" -newer "$binary")" ]; then
    echo "run.sh: building $binary (${#sources[@]} library files)" >&2
    swiftc -sanitize=fuzzer,address -parse-as-library -O -g -use-ld=lld \
        -swift-version 6 -module-name KeyAuthTokenFuzz -package-name keyauth \
        -I "$root/Sources/CKeyAuthOpenSSL" -I "$root/Sources/CKeyAuthPAM" -I "$root/Sources/CKeyAuthTSS2" \
        "${sources[@]}" "$here/TokenParser/main.swift" \
        -lcrypto -lpam -ltss2-esys -ltss2-tctildr -ltss2-mu -ltss2-rc -o "$binary"
fi

if [ "${1:-}" = "--reproduce" ]; then
    shift
    exec "$binary" -runs=1 "$@"
fi

seconds="${1:-180}"
shift || true
corpus="$(mktemp -d "${TMPDIR:-/tmp}/keyauth-fuzz-corpus.XXXXXX")"
trap 'rm -rf "$corpus"' EXIT

echo "run.sh: fuzzing for $seconds s; crash inputs go to $out/artifacts/" >&2
# The first corpus directory receives new entries; the seeds are read from the second, and the
# saved findings from the third, so that each finding is checked again on every run.
"$binary" "$corpus" "$here/corpus" "$here/findings" \
    -max_total_time="$seconds" -max_len=9000 -dict="$here/TokenParser/token.dict" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
