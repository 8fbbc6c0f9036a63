# The body the run-*.sh scripts share: sourced by each of them after it has set
#   target     the short name (build and artifact directory .build-fuzz/$target)
#   product    the SwiftPM product of the fuzz target
#   seeds      the directory of seeds under Fuzz/, read and never modified
#   findings   the directory of saved findings under Fuzz/, replayed by every run
#   flags      an array of the target's own libFuzzer flags (-max_len, -dict, ...)
# It sees the script's own arguments: [SECONDS] [extra libFuzzer flags...], or --reproduce FILE....
#
# SwiftPM builds the product in release mode into its own scratch directory, every Swift module
# instrumented (-sanitize=fuzzer,address) and -DKEYAUTH_LIBFUZZER, which turns the target's
# executable from a replay driver into libFuzzer's. New corpus entries go to a temporary
# directory; a crash input goes to $KEYAUTH_FUZZ_OUT/artifacts/. Exit status: 0 when the time ran
# out without a finding, non-zero on a crash (a trap, an ASan report, a broken invariant of the
# harness), a leak or a build failure.
#
# Environment:
#   KEYAUTH_FUZZ_OUT   build and artifact directory (default .build-fuzz/$target in the package)
set -euo pipefail

# Swift's crash reporter would attach to every crash and can outlive libFuzzer's report.
export SWIFT_BACKTRACE=enable=no

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${KEYAUTH_FUZZ_OUT:-$root/.build-fuzz/$target}"
script="run-$target.sh"
mkdir -p "$out/artifacts"

echo "$script: building the fuzz target (release, -sanitize=fuzzer,address)" >&2
swift build --package-path "$root" --scratch-path "$out/spm" -c release --product "$product" \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DKEYAUTH_LIBFUZZER \
    -Xswiftc -g >&2
binary="$out/spm/release/$product"

if [ "${1:-}" = "--reproduce" ]; then
    shift
    exec "$binary" -runs=1 "$@"
fi

seconds="${1:-180}"
shift || true
corpus="$(mktemp -d "${TMPDIR:-/tmp}/$product-corpus.XXXXXX")"
trap 'rm -rf "$corpus"' EXIT

echo "$script: fuzzing for $seconds s; crash inputs go to $out/artifacts/" >&2
# The first corpus directory receives new entries; the seeds are read from the second and the
# saved findings from the third, so every finding is checked again on every run.
"$binary" "$corpus" "$here/$seeds" "$here/$findings" \
    -max_total_time="$seconds" "${flags[@]}" -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
