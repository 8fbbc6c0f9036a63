#!/usr/bin/env bash
# End-to-end login benchmark: `keyauth login` (process start, key load, sign, HTTP, token store)
# with an RSA-3072 key against a Python script doing the same with PyJWT and urllib, alternated
# in one run; then a cached `keyauth token` against the process start-up floor (`keyauth --version`).
#
#   bash Benchmarks/login/run.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-30}

bash scripts/install-deps.sh
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth >&2
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/keyauth-login-bench.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Open enrollment (loopback only): the benchmark registers its device without a code. No metrics
# listener: the port after the free one found above may be taken.
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --quiet --enrollment open \
    --metrics-listen off 2>/dev/null &
server_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done

export KEYAUTH_HOME="$work/home"
issuer="http://127.0.0.1:$port"
"$bin/keyauth" register --server "$issuer" --user bench --presence none --bits 3072 >/dev/null
key_file=$(find "$KEYAUTH_HOME" -name device-key.pem | head -n 1)
kid=$("$bin/keyauth" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d["accounts"][0] if "accounts" in d else d; print(a.get("fingerprint") or a.get("kid"))')

python3 - "$bin/keyauth" "$key_file" "$issuer" "$kid" "$work/py-token.json" "$runs" <<'PY'
import statistics, subprocess, sys, time
keyauth, key_file, issuer, kid, token_file, runs = sys.argv[1:7]
runs = int(runs)
def timed(command):
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start
keyauth_times, python_times = [], []
for _ in range(runs):
    keyauth_times.append(timed([keyauth, "login"]))
    python_times.append(timed([sys.executable, "Benchmarks/login/python_login.py", key_file, issuer, kid, token_file]))
token_times, floor_times = [], []
for _ in range(runs):
    token_times.append(timed([keyauth, "token"]))
    floor_times.append(timed([keyauth, "--version"]))
ms = lambda values: statistics.median(values) * 1000
print(f"login, RSA-3072, {runs} alternating runs (median wall time)")
print(f"  keyauth login            {ms(keyauth_times):8.2f} ms")
print(f"  python3 + PyJWT + urllib {ms(python_times):8.2f} ms")
print(f"  ratio                    {ms(keyauth_times) / ms(python_times):8.3f}  (target <= 0.15)")
print(f"cached token")
print(f"  keyauth token            {ms(token_times):8.2f} ms")
print(f"  keyauth --version        {ms(floor_times):8.2f} ms  (process start-up floor)")
PY
