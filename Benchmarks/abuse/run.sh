#!/usr/bin/env bash
# What one address can make keyauth-server store by flooding GET /authorize, and whether a user
# signs in meanwhile.
#
#   bash Benchmarks/abuse/run.sh [--seconds N] [--connections N]
#
# Builds keyauth-server and keyauth in release mode, starts the server on a fresh SQLite file
# (production settings, request log on), registers a relying party and alice's device, then
# floods `GET /authorize` (a valid request with a 1 KiB state) from 127.0.0.1 with wrk for
# SECONDS (default 60) while a browser (Python's http.client from 127.0.0.2) signs alice in
# through /authorize, approved with `keyauth approve` typing the page's code. It prints the
# flood's rate, the database's size (file and WAL) and row counts before and after, and how the
# sign-in went. Exit status 1 when the sign-in failed or the database grew by more than 1 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=60
connections=16
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) seconds=${2:?}; shift 2 ;;
    --connections) connections=${2:?}; shift 2 ;;
    *) sed -n '5p' "$0" | sed 's/^# //' >&2; exit 64 ;;
    esac
done
command -v wrk >/dev/null || { echo "run.sh: wrk is needed (apt install wrk)" >&2; exit 69; }
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth >&2
bin=$(swift build -c release --show-bin-path)
exec python3 Benchmarks/abuse/authorize_flood.py "$bin" "$seconds" "$connections"
