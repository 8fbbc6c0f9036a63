#!/usr/bin/env bash
# Builds the fuzz target of keyauth agent's ssh-agent message parser (Fuzz/SSHAgentHarness,
# Fuzz/SSHAgentParser) with libFuzzer and AddressSanitizer, replays the seeds and findings, then
# fuzzes.
#
#   Fuzz/run-ssh-agent.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-ssh-agent.sh --reproduce FILE...                    run the target once on each FILE
#
# As Fuzz/run-server.sh: a release build in its own scratch directory with -sanitize=fuzzer,address
# and -DKEYAUTH_LIBFUZZER (Fuzz/SSHAgentParser then holds LLVMFuzzerTestOneInput instead of the
# replay driver); new corpus entries go to a temporary directory, Fuzz/ssh-agent-corpus/ and
# Fuzz/ssh-agent-findings/ are only read, a crash input goes to $KEYAUTH_FUZZ_OUT/artifacts/.
# Exit status: 0 when the time ran out without a finding, non-zero on a crash (a trap, an ASan
# report, a broken invariant of the harness), a leak or a build failure.
#
# Environment:
#   KEYAUTH_FUZZ_OUT   build and artifact directory (default .build-fuzz/ssh-agent in the package)
set -euo pipefail

export SWIFT_BACKTRACE=enable=no

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${KEYAUTH_FUZZ_OUT:-$root/.build-fuzz/ssh-agent}"
mkdir -p "$out/artifacts"

echo "run-ssh-agent.sh: building the fuzz target (release, -sanitize=fuzzer,address)" >&2
swift build --package-path "$root" --scratch-path "$out/spm" -c release --product keyauth-fuzz-ssh-agent \
    -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library -Xswiftc -DKEYAUTH_LIBFUZZER \
    -Xswiftc -g >&2
binary="$out/spm/release/keyauth-fuzz-ssh-agent"

if [ "${1:-}" = "--reproduce" ]; then
    shift
    exec "$binary" -runs=1 "$@"
fi

seconds="${1:-180}"
shift || true
corpus="$(mktemp -d "${TMPDIR:-/tmp}/keyauth-fuzz-ssh-agent-corpus.XXXXXX")"
trap 'rm -rf "$corpus"' EXIT

echo "run-ssh-agent.sh: fuzzing for $seconds s; crash inputs go to $out/artifacts/" >&2
# New entries go to the first directory; the seeds and the findings are read from the others.
"$binary" "$corpus" "$here/ssh-agent-corpus" "$here/ssh-agent-findings" \
    -max_total_time="$seconds" -max_len=70000 -dict="$here/ssh-agent.dict" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
