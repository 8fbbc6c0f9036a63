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
work=$(mktemp -d /tmp/keyauth-tpm-bench.XXXXXX)
# shellcheck source=Benchmarks/tpm/swtpm.sh
source Benchmarks/tpm/swtpm.sh
trap 'stop_swtpm "$work"; rm -rf "$work"' EXIT
start_swtpm "$work"
KEYAUTH_TPM_TCTI="$tpm_tcti" "$bin/keyauth-bench" tpm --signatures "$signatures" --generations "$generations"
