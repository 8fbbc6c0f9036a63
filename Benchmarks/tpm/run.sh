#!/usr/bin/env bash
# TPM-held keys next to file keys: starts a software TPM (swtpm) with a fresh state on loopback,
# then times key generation and one login's signature (keyauth-bench tpm, release build).
#
#   bash Benchmarks/tpm/run.sh [SIGNATURES] [GENERATIONS]
#
# A real TPM is slower than swtpm: tens to hundreds of milliseconds per RSA signature, and
# seconds (sometimes tens of seconds) per RSA key generation. To measure one, run the benchmark
# alone with KEYAUTH_TPM_TCTI=device:/dev/tpmrm0 (read access to /dev/tpmrm0 is needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
signatures=${1:-50}
generations=${2:-5}

bash scripts/install-deps.sh
swift build -c release --product keyauth-bench >&2
bin=$(swift build -c release --show-bin-path)
# swtpm changes its working directory: the state directory must be absolute.
work=$(mktemp -d /tmp/keyauth-tpm-bench.XXXXXX)
trap '[ -f "$work/swtpm.pid" ] && kill "$(cat "$work/swtpm.pid")" 2>/dev/null; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket
for _ in range(100):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]; b.bind(("127.0.0.1", port + 1))
        print(port); break
    except OSError:
        pass
    finally:
        a.close(); b.close()')
mkdir "$work/state"
swtpm socket --tpm2 --tpmstate dir="$work/state" --server type=tcp,bindaddr=127.0.0.1,port="$port" \
    --ctrl type=tcp,bindaddr=127.0.0.1,port=$((port + 1)) --flags not-need-init,startup-clear \
    --pid file="$work/swtpm.pid" --log file=- --daemon
KEYAUTH_TPM_TCTI="swtpm:host=127.0.0.1,port=$port" \
    "$bin/keyauth-bench" tpm --signatures "$signatures" --generations "$generations"
