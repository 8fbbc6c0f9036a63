#!/usr/bin/env bash
# Builds keyauth-server's whole-surface fuzz target (Fuzz/ServerHarness, Fuzz/ServerResponder)
# with libFuzzer and AddressSanitizer, replays the seeds and findings, then fuzzes.
#
#   Fuzz/run-server.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-server.sh --reproduce FILE...                    run the target once on each FILE
#
# SwiftPM builds the product in release mode into its own scratch directory, with every Swift
# module of the server instrumented (-sanitize=fuzzer,address) and -DKEYAUTH_LIBFUZZER, which
# turns Fuzz/ServerResponder/main.swift from a replay driver into LLVMFuzzerTestOneInput. New
# corpus entries go to a temporary directory; the seeds in Fuzz/server-corpus/ and the inputs in
# Fuzz/server-findings/ are read, never modified; a crash input goes to
# $KEYAUTH_FUZZ_OUT/artifacts/. Exit status: 0 when the time ran out without a finding,
# non-zero on a crash (a trap, an ASan report, or a broken invariant of the harness), a leak or
# a build failure.
#
# Environment:
#   KEYAUTH_FUZZ_OUT   build and artifact directory (default .build-fuzz/server in the package)
set -euo pipefail

# Swift's crash reporter would attach to every crash and can outlive libFuzzer's report.
export SWIFT_BACKTRACE=enable=no

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${KEYAUTH_FUZZ_OUT:-$root/.build-fuzz/server}"
mkdir -p "$out/artifacts"

echo "run-server.sh: building the fuzz target (release, -sanitize=fuzzer,address)" >&2
swift build --package-path "$root" --scratch-path "$out/spm" -c release --product keyauth-fuzz-server \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DKEYAUTH_LIBFUZZER \
    -Xswiftc -g >&2
binary="$out/spm/release/keyauth-fuzz-server"

if [ "${1:-}" = "--reproduce" ]; then
    shift
    exec "$binary" -runs=1 "$@"
fi

seconds="${1:-180}"
shift || true
corpus="$(mktemp -d "${TMPDIR:-/tmp}/keyauth-fuzz-server-corpus.XXXXXX")"
trap 'rm -rf "$corpus"' EXIT

echo "run-server.sh: fuzzing for $seconds s; crash inputs go to $out/artifacts/" >&2
# The first corpus directory receives new entries; the seeds are read from the second and the
# saved findings from the third, so every finding is checked again on every run.
"$binary" "$corpus" "$here/server-corpus" "$here/server-findings" \
    -max_total_time="$seconds" -max_len=16384 -dict="$here/server.dict" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 -detect_leaks=0 "$@"
