#!/usr/bin/env bash
# End-to-end login benchmark: `keyauth login` (process start, key load, sign, HTTP, token store)
# with an RSA-3072 key file, with an RSA-3072 key held by a software TPM (swtpm, started here
# with a fresh state), and a Python script doing the key file's work with PyJWT and urllib,
# alternated in one run; then `keyauth register` (key generation included) with each key store,
# the TPM signatures one login makes (counted in the TPM stack's trace), and a cached
# `keyauth token` against the process start-up floor (`keyauth --version`).
#
#   bash Benchmarks/login/run.sh [RUNS] [REGISTRATIONS]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-30}
registrations=${2:-5}

bash scripts/install-deps.sh
swift build -c release --product keyauth-server >&2
swift build -c release --product keyauth >&2
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/keyauth-login-bench.XXXXXX)
server_pid=""
# shellcheck source=Benchmarks/tpm/swtpm.sh
source Benchmarks/tpm/swtpm.sh
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; stop_swtpm "$work"; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Open enrollment (loopback only): the benchmark registers its devices without a code. No metrics
# listener: the port after the free one found above may be taken.
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --quiet --enrollment open \
    --metrics-listen off 2>/dev/null &
server_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
start_swtpm "$work"

# No presence check for either key, so that both logins do the same work apart from the key.
export KEYAUTH_HOME="$work/home"
export KEYAUTH_TPM_TCTI="$tpm_tcti"
issuer="http://127.0.0.1:$port"
"$bin/keyauth" register --server "$issuer" --user bench --presence none --bits 3072 --key-store file >/dev/null
key_file=$(find "$KEYAUTH_HOME" -name device-key.pem | head -n 1)
kid=$("$bin/keyauth" status --json | python3 -c 'import json,sys; d=json.load(sys.stdin); a=d["accounts"][0] if "accounts" in d else d; print(a.get("fingerprint") or a.get("kid"))')
tpm_home="$work/tpm-home"
KEYAUTH_HOME="$tpm_home" "$bin/keyauth" register --server "$issuer" --user bench-tpm --presence none --bits 3072 \
    --key-store tpm >/dev/null

python3 - "$bin/keyauth" "$key_file" "$issuer" "$kid" "$work" "$tpm_home" "$runs" "$registrations" <<'PY'
import os, statistics, subprocess, sys, time
keyauth, key_file, issuer, kid, work, tpm_home, runs, registrations = sys.argv[1:9]
runs, registrations = int(runs), int(registrations)
tpm_env = dict(os.environ, KEYAUTH_HOME=tpm_home)
def timed(command, env=None):
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start
file_times, tpm_times, python_times = [], [], []
for _ in range(runs):
    file_times.append(timed([keyauth, "login"]))
    tpm_times.append(timed([keyauth, "login"], tpm_env))
    python_times.append(timed([sys.executable, "Benchmarks/login/python_login.py", key_file, issuer, kid,
                               work + "/py-token.json"]))
# The TPM stack logs each Esys_Sign call once at trace level: one line per TPM signature.
trace = subprocess.run([keyauth, "login"], env=dict(tpm_env, TSS2_LOG="esys+trace"), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True).stderr
login_signatures = trace.count("Esys_Sign_Async(")
file_registrations, tpm_registrations = [], []
for index in range(registrations):
    register = [keyauth, "register", "--server", issuer, "--presence", "none", "--bits", "3072"]
    file_registrations.append(timed(register + ["--user", f"file{index}", "--key-store", "file"],
                                    dict(os.environ, KEYAUTH_HOME=f"{work}/file-{index}")))
    tpm_registrations.append(timed(register + ["--user", f"tpm{index}", "--key-store", "tpm"],
                                   dict(os.environ, KEYAUTH_HOME=f"{work}/tpm-{index}")))
token_times, floor_times = [], []
for _ in range(runs):
    token_times.append(timed([keyauth, "token"]))
    floor_times.append(timed([keyauth, "--version"]))
ms = lambda values: statistics.median(values) * 1000
print(f"login, RSA-3072, {runs} alternating runs (median wall time)")
print(f"  keyauth login, key file       {ms(file_times):8.2f} ms")
print(f"  keyauth login, TPM key        {ms(tpm_times):8.2f} ms  (swtpm)")
print(f"  python3 + PyJWT + urllib      {ms(python_times):8.2f} ms")
print(f"  ratio key file / python       {ms(file_times) / ms(python_times):8.3f}  (target <= 0.15)")
print(f"  TPM signatures in one login   {login_signatures:5d}")
print(f"register, RSA-3072, key generation included, median of {registrations}")
print(f"  keyauth register, key file    {ms(file_registrations):8.2f} ms")
print(f"  keyauth register, TPM key     {ms(tpm_registrations):8.2f} ms  (swtpm)")
print(f"cached token")
print(f"  keyauth token                 {ms(token_times):8.2f} ms")
print(f"  keyauth --version             {ms(floor_times):8.2f} ms  (process start-up floor)")
PY
