#!/usr/bin/env bash
# SSH certificate benchmark: the server's time to issue a certificate (POST /v1/ssh/certificates,
# from its own request-duration metric), `keyauth ssh cert` end to end, and an `ssh` login to a
# real sshd on loopback through `keyauth agent` (an RSA-3072 key file, and an RSA-3072 key held
# by a software TPM, swtpm with a fresh state), next to the same login with a plain RSA-3072 key
# through OpenSSH's own ssh-agent and with the plain key file itself, alternated in one run.
# Needs root (sshd) and swtpm.
#
#   bash Benchmarks/ssh/run.sh [RUNS]
#
# KEYAUTH_BENCH_BIN=DIR uses the binaries in DIR (.build-deb/release after scripts/build-deb.sh,
# or .build/debug for a quick check) instead of building release ones.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-20}
[ "$(id -u)" -eq 0 ] || { echo "run as root: it starts sshd" >&2; exit 1; }

# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh
work=$(mktemp -d /tmp/keyauth-ssh-bench.XXXXXX)
server_pid=""
sshd_pid=""
# shellcheck source=Benchmarks/tpm/swtpm.sh
source Benchmarks/tpm/swtpm.sh
cleanup() {
    for account in file tpm; do
        XDG_RUNTIME_DIR="$work/run-$account" KEYAUTH_HOME="$work/$account" "$bin/keyauth" agent --stop \
            >/dev/null 2>&1 || true
    done
    [ -n "${SSH_AGENT_PID:-}" ] && kill "$SSH_AGENT_PID" 2>/dev/null
    [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    stop_swtpm "$work"
    rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The server: an SSH CA (which refuses open enrollment), limits out of the way, metrics on.
port=$(free_port)
metrics_port=$(free_port)
"$bin/keyauth-server" ssh-ca init --ssh-ca-key-file "$work/ssh-ca.pem" >"$work/ca.pub" 2>/dev/null
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --quiet \
    --metrics-listen "127.0.0.1:$metrics_port" --rate-limit 100000 --registration-limit 100000 \
    --ssh-ca-key-file "$work/ssh-ca.pem" 2>/dev/null &
server_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
issuer="http://127.0.0.1:$port"
start_swtpm "$work"
export KEYAUTH_TPM_TCTI="$tpm_tcti"

# Two accounts with no presence check, so that both do the same work apart from the key.
for account in file tpm; do
    code=$("$bin/keyauth-server" enroll "$account" --db "$work/server.db" 2>/dev/null)
    KEYAUTH_HOME="$work/$account" "$bin/keyauth" register --server "$issuer" --user "$account" --presence none \
        --bits 3072 --key-store "$account" --enrollment-code "$code" >/dev/null
    KEYAUTH_HOME="$work/$account" "$bin/keyauth" ssh cert >/dev/null 2>&1
done
ssh-keygen -q -t rsa -b 3072 -N '' -f "$work/plain"

# sshd trusting the CA (file and tpm as principals of root) and the plain key.
mkdir -p /run/sshd "$work/principals"
printf 'file\ntpm\n' >"$work/principals/root"
cp "$work/plain.pub" "$work/authorized_keys"
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
sshd_port=$(free_port)
cat >"$work/sshd_config" <<CONFIG
Port $sshd_port
ListenAddress 127.0.0.1
HostKey $work/host_key
PidFile $work/sshd.pid
TrustedUserCAKeys $work/ca.pub
AuthorizedPrincipalsFile $work/principals/%u
AuthorizedKeysFile $work/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
StrictModes no
LogLevel ERROR
CONFIG
/usr/sbin/sshd -D -e -f "$work/sshd_config" 2>"$work/sshd.log" &
sshd_pid=$!
for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$sshd_port") 2>/dev/null && break; sleep 0.05; done

# The agents: keyauth agent for each account (its own runtime directory), and ssh-agent.
for account in file tpm; do
    mkdir -m 0700 "$work/run-$account"
    XDG_RUNTIME_DIR="$work/run-$account" KEYAUTH_HOME="$work/$account" "$bin/keyauth" agent --background \
        >"$work/agent-$account.env" 2>/dev/null
done
eval "$(ssh-agent -s)" >/dev/null
ssh-add -q "$work/plain" 2>/dev/null

python3 - "$bin/keyauth" "$work" "$sshd_port" "$metrics_port" "$runs" <<'PY'
import os, statistics, subprocess, sys, time, urllib.request
keyauth, work, sshd_port, metrics_port, runs = sys.argv[1:6]
runs = int(runs)
def timed(command, env=None):
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start
def socket_of(account):
    for line in open(f"{work}/agent-{account}.env"):
        if line.startswith("SSH_AUTH_SOCK="):
            return line.split("'")[1]
    raise SystemExit(f"no SSH_AUTH_SOCK from keyauth agent ({account})")
base = ["ssh", "-F", "/dev/null", "-p", sshd_port, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
target = ["root@127.0.0.1", "true"]
logins = {
    "keyauth agent, key file": base + ["-o", f"IdentityAgent={socket_of('file')}"] + target,
    # ssh's default, rsa-sha2-512, which the TPM signs like rsa-sha2-256.
    "keyauth agent, TPM key": base + ["-o", f"IdentityAgent={socket_of('tpm')}"] + target,
    "ssh-agent, plain key": base + ["-o", f"IdentityAgent={os.environ['SSH_AUTH_SOCK']}"] + target,
    "plain key file, no agent": base + ["-o", "IdentityAgent=none", "-o", "IdentitiesOnly=yes", "-i",
        f"{work}/plain"] + target,
}
times = {name: [] for name in logins}
certs = {"file": [], "tpm": []}
for _ in range(runs):
    for name, command in logins.items():
        times[name].append(timed(command))
    for account in certs:
        certs[account].append(timed([keyauth, "ssh", "cert"], dict(os.environ, KEYAUTH_HOME=f"{work}/{account}")))
metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
def metric(name):
    for line in metrics.splitlines():
        if line.startswith(name + '{route="/v1/ssh/certificates"}'):
            return float(line.split()[-1])
    return 0.0
count = metric("keyauth_http_request_duration_seconds_count")
mean = metric("keyauth_http_request_duration_seconds_sum") / count if count else float("nan")
ms = lambda values: statistics.median(values) * 1000
print(f"certificate issuance")
print(f"  POST /v1/ssh/certificates, server time   {mean * 1000:8.2f} ms  (mean of {int(count)}, its own metric)")
print(f"  keyauth ssh cert, key file              {ms(certs['file']):8.2f} ms  (median, end to end, token cached)")
print(f"  keyauth ssh cert, TPM key               {ms(certs['tpm']):8.2f} ms  (swtpm)")
print(f"ssh root@127.0.0.1 true, RSA-3072, {runs} alternating runs (median wall time)")
for name, values in times.items():
    print(f"  {name:38s}  {ms(values):8.2f} ms")
PY
