#!/usr/bin/env bash
# Builds the fuzz target of keyauth agent's ssh-agent message parser (Fuzz/SSHAgentHarness,
# Fuzz/SSHAgentParser) with libFuzzer and AddressSanitizer, replays the seeds
# (Fuzz/ssh-agent-corpus/) and findings (Fuzz/ssh-agent-findings/), then fuzzes. How:
# Fuzz/fuzz-target.sh.
#
#   Fuzz/run-ssh-agent.sh [SECONDS] [extra libFuzzer flags...]   fuzz for SECONDS (default 180)
#   Fuzz/run-ssh-agent.sh --reproduce FILE...                    run the target once on each FILE
target=ssh-agent
product=keyauth-fuzz-ssh-agent
seeds=ssh-agent-corpus
findings=ssh-agent-findings
flags=(-max_len=70000 -dict="$(dirname "$0")/ssh-agent.dict")
source "$(dirname "$0")/fuzz-target.sh"
