#!/usr/bin/env bash
# Login timing: does refusing a login take as long for a registered key as for an unknown one?
# Starts keyauth-server (release build, SQLite) on loopback, registers an RSA-3072 key with an
# enrollment code, then alternates PAIRS logins with a bad 384-byte signature for the registered
# kid and PAIRS with a 384-byte signature for an unknown kid on one keep-alive connection, and
# prints the median round trip of each (keyauth-bench timing).
#
#   bash Benchmarks/timing/run.sh [PAIRS]
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-3000}

bash scripts/install-deps.sh
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth-bench >&2
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/keyauth-timing.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Every measured login fails on purpose: lift the per-address failure limit.
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/timing.db" --rate-limit 100000 --quiet \
    2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" || { cat "$work/server.log" >&2; exit 1; }

code=$("$bin/keyauth-server" enroll timing --db "$work/timing.db" 2>/dev/null)
"$bin/keyauth-bench" timing --server "http://127.0.0.1:$port" --code "$code" --pairs "$pairs"
