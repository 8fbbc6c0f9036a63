#!/usr/bin/env bash
# Builds the binary-parser fuzz target (Fuzz/BinaryHarness, Fuzz/BinaryParsers: TPM attestation
# structures, and other binary formats as they are added as modes) with libFuzzer and
# AddressSanitizer, replays the seeds and findings, then fuzzes.
#
#   Fuzz/run-binary.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-binary.sh --reproduce FILE...                    run the target once on each FILE
#
# SwiftPM builds the product in release mode into its own scratch directory, every Swift module
# instrumented (-sanitize=fuzzer,address) and -DKEYAUTH_LIBFUZZER, which turns
# Fuzz/BinaryParsers/ from a replay driver into LLVMFuzzerTestOneInput. New corpus entries go to a
# temporary directory; Fuzz/binary-corpus/ and Fuzz/binary-findings/ are read, never modified; a
# crash input goes to $KEYAUTH_FUZZ_OUT/artifacts/. Exit status: 0 when the time ran out without a
# finding, non-zero on a crash (a trap, an ASan report, a broken invariant), a leak or a build
# failure.
#
# Environment:
#   KEYAUTH_FUZZ_OUT   build and artifact directory (default .build-fuzz/binary in the package)
set -euo pipefail

# Swift's crash reporter would attach to every crash and can outlive libFuzzer's report.
export SWIFT_BACKTRACE=enable=no

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${KEYAUTH_FUZZ_OUT:-$root/.build-fuzz/binary}"
mkdir -p "$out/artifacts"

echo "run-binary.sh: building the fuzz target (release, -sanitize=fuzzer,address)" >&2
swift build --package-path "$root" --scratch-path "$out/spm" -c release --product keyauth-fuzz-binary \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DKEYAUTH_LIBFUZZER \
    -Xswiftc -g >&2
binary="$out/spm/release/keyauth-fuzz-binary"

if [ "${1:-}" = "--reproduce" ]; then
    shift
    exec "$binary" -runs=1 "$@"
fi

seconds="${1:-180}"
shift || true
corpus="$(mktemp -d "${TMPDIR:-/tmp}/keyauth-fuzz-binary-corpus.XXXXXX")"
trap 'rm -rf "$corpus"' EXIT

echo "run-binary.sh: fuzzing for $seconds s; crash inputs go to $out/artifacts/" >&2
# The first corpus directory receives new entries; the seeds are read from the second and the
# saved findings from the third, so every finding is checked again on every run.
"$binary" "$corpus" "$here/binary-corpus" "$here/binary-findings" \
    -max_total_time="$seconds" -max_len=12000 -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
