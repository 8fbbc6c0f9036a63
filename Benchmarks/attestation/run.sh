#!/usr/bin/env bash
# TPM attestation's cost, in time and in TPM commands: `keyauth register --key-store tpm`
# (attested: a software TPM manufactured with an endorsement key certificate by a local CA that
# the server trusts with --tpm-ca), the `keyauth login` after it, `keyauth attest`, and, for
# comparison, the same registration and login against a server without --tpm-ca
# (tpm-unverified). Every TPM command goes through a logging proxy (tpm-command-log.py), so the
# counts are the commands the TPM received, not calls of the TPM stack.
#
#   bash Benchmarks/attestation/run.sh [RUNS]
#
# RUNS registrations of each kind (default 5), each on a fresh account, with an RSA-2048 device
# key and PIN 2468. The binaries are the debug build (`swift build`), or those in KEYAUTH_BIN
# (`KEYAUTH_BIN=$(swift build -c release --show-bin-path)` after a release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
bin=${KEYAUTH_BIN:-$(swift build --show-bin-path)}
[ -x "$bin/keyauth" ] && [ -x "$bin/keyauth-server" ] || { echo "run.sh: build first: swift build" >&2; exit 1; }
work=$(mktemp -d /tmp/keyauth-attest-bench.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# free_port_pair, from the software TPM helpers of the other TPM benchmarks.
# shellcheck source=Benchmarks/tpm/swtpm.sh
source Benchmarks/tpm/swtpm.sh

# A TPM manufactured as a vendor would: swtpm_setup with swtpm_localca as the CA, configured in
# $work/ca so that nothing outside $work is touched (the tests' SoftwareTPM does the same).
ca="$work/ca"
mkdir -p "$ca" "$work/state" "$work/roots"
printf 'statedir = %s\nsigningkey = %s/signkey.pem\nissuercert = %s/issuercert.pem\ncertserial = %s/certserial\n' \
    "$ca" "$ca" "$ca" "$ca" >"$ca/localca.conf"
echo "--platform-manufacturer keyauth-bench" >"$ca/localca.options"
printf 'create_certs_tool = /usr/bin/swtpm_localca\ncreate_certs_tool_config = %s/localca.conf\ncreate_certs_tool_options = %s/localca.options\nactive_pcr_banks = sha256\n' \
    "$ca" "$ca" >"$ca/setup.conf"
swtpm_setup --tpm2 --tpmstate "$work/state" --create-ek-cert --config "$ca/setup.conf" --overwrite >/dev/null
cp "$ca/swtpm-localca-rootca-cert.pem" "$ca/issuercert.pem" "$work/roots/"

tpm_port=$(free_port_pair)
swtpm socket --tpm2 --tpmstate dir="$work/state" --server type=tcp,bindaddr=127.0.0.1,port="$tpm_port" \
    --ctrl type=tcp,bindaddr=127.0.0.1,port=$((tpm_port + 1)) --flags not-need-init,startup-clear &
pids+=($!)
proxy_port=$(free_port_pair)
log="$work/tpm-commands.log"
: >"$log"
python3 Benchmarks/attestation/tpm-command-log.py "$proxy_port" "$tpm_port" "$log" &
pids+=($!)
for _ in $(seq 1 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $proxy_port)).close()" 2>/dev/null && break
    sleep 0.1
done
export KEYAUTH_TPM_TCTI="swtpm:host=127.0.0.1,port=$proxy_port"

# Starts a server on a free port with extra options; sets server_url.
start_server() {
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server-$port.db" --quiet --enrollment open \
        --metrics-listen off "$@" 2>/dev/null &
    pids+=($!)
    server_url="http://127.0.0.1:$port"
    for _ in $(seq 1 100); do curl -fs -o /dev/null "$server_url/healthz" && break; sleep 0.1; done
}

# Runs one keyauth command with the PIN on standard input; prints "SECONDS COMMANDS NAMES",
# NAMES the TPM commands it sent, counted (`3xSign,...`).
measure() {
    local before after start end
    before=$(wc -l <"$log")
    start=$(date +%s.%N)
    echo 2468 | "$bin/keyauth" "$@" --pin-stdin >/dev/null
    end=$(date +%s.%N)
    sleep 0.2 # the proxy writes a command's line after forwarding it
    after=$(wc -l <"$log")
    printf '%.3f %d %s\n' "$(echo "$end - $start" | bc)" $((after - before)) \
        "$(tail -n $((after - before)) "$log" | awk '{print $2}' | sort | uniq -c | sort -rn |
            awk '{printf "%s%sx%s", (NR > 1 ? "," : ""), $1, $2}')"
}

# RUNS registrations and logins against the running server, each in a home of its own.
series() {
    local label=$1 i
    for i in $(seq 1 "$runs"); do
        export KEYAUTH_HOME="$work/home-$label-$i"
        echo "$label register $(measure register --server "$server_url" --user "$label$i" --key-store tpm --bits 2048)"
        echo "$label login $(measure login)"
        echo "$label status $("$bin/keyauth" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["accounts"][0]["tier"])')"
    done
}

start_server --tpm-ca "$work/roots"
series attested
for i in $(seq 1 "$runs"); do
    export KEYAUTH_HOME="$work/home-attested-$i"
    echo "attested attest $(measure attest)"
done
start_server
series unverified
