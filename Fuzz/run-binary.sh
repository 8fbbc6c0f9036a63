#!/usr/bin/env bash
# Builds the binary-parser fuzz target (Fuzz/BinaryHarness, Fuzz/BinaryParsers: TPM attestation
# structures, and other binary formats as they are added as modes) with libFuzzer and
# AddressSanitizer, replays the seeds (Fuzz/binary-corpus/) and findings (Fuzz/binary-findings/),
# then fuzzes. How: Fuzz/fuzz-target.sh.
#
#   Fuzz/run-binary.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-binary.sh --reproduce FILE...                    run the target once on each FILE
target=binary
product=keyauth-fuzz-binary
seeds=binary-corpus
findings=binary-findings
flags=(-max_len=12000)
source "$(dirname "$0")/fuzz-target.sh"
