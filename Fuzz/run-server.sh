#!/usr/bin/env bash
# Builds keyauth-server's whole-surface fuzz target (Fuzz/ServerHarness, Fuzz/ServerResponder)
# with libFuzzer and AddressSanitizer, replays the seeds (Fuzz/server-corpus/) and findings
# (Fuzz/server-findings/), then fuzzes. How: Fuzz/fuzz-target.sh.
#
#   Fuzz/run-server.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-server.sh --reproduce FILE...                    run the target once on each FILE
target=server
product=keyauth-fuzz-server
seeds=server-corpus
findings=server-findings
flags=(-max_len=16384 -dict="$(dirname "$0")/server.dict" -detect_leaks=0)
source "$(dirname "$0")/fuzz-target.sh"
